//! Fenced file writes: a file in a directory is replaced whole, by an atomic rename, only while
//! the writer's token is at least the highest one that has written it.
//!
//! A [`FileFence`] on a directory keeps, per file, a fence in the directory's `.lease-fence/`
//! folder: `<file>.token` (the highest token accepted, in decimal, replaced by a rename) and
//! `<file>.lock` (never replaced; the lock is taken on it). [`FileFence::write`]:
//!
//! 1. writes the contents to a temporary file in `.lease-fence/` and flushes it to disk
//!    (`fsync`), outside the lock, so a large write does not hold anyone up;
//! 2. takes the file's lock (`flock(LOCK_EX)` through `std::fs::File::lock`; it waits while
//!    another fenced write of the same file holds it);
//! 3. reads the fence: a token lower than it is refused with [`FenceError::Stale`], the
//!    temporary file removed, the file untouched;
//! 4. raises the fence when the token is higher (a new `<file>.token`, flushed, renamed into
//!    place, the folder flushed), *then* renames the temporary file over the file and flushes
//!    the directory — so after a crash the fence is never behind the data it guards;
//! 5. lets the lock go.
//!
//! **What it guarantees.** Among writers that go through a `FileFence` on the same directory
//! (in one process or many) of **one host** on a **local filesystem** (ext4, XFS, btrfs,
//! tmpfs): once a write under token *t* has returned `Ok`, every later write under a lower
//! token is refused, and writes are applied in the order they pass the lock, so a write never
//! lands after a higher token's. A reader, locked or not, sees the whole old file or the whole
//! new one, never a mix (the rename is atomic). A returned `Ok` is durable (the file, the fence
//! and both directories are flushed).
//!
//! **What it cannot do.** The lock is advisory: a program that writes the file directly, not
//! through a fence, is not stopped. It is not for network filesystems (NFS, SMB, CephFS, a
//! FUSE mount): `flock` there is emulated or local to one client, and a rename or a flush may
//! reach other clients late, so two hosts could both pass the check. Deleting the
//! `.lease-fence/` folder deletes the fences (the next write of any token is accepted). A
//! writer paused while it holds the lock (step 4) holds up the next writer of that file until
//! it resumes or dies (a dead process's lock is let go by the kernel); its write, which passed
//! the check before any higher token wrote, then lands first and is overwritten by the next.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use lease_core::backend::HolderToken;
use lease_core::{Error, ErrorKind, Result};

use crate::error::{FenceError, Stale};

/// The folder, inside the fenced directory, that holds the fences and the temporary files. It
/// is on the same filesystem as the files (so the renames are atomic) and is never a fenced
/// file's name.
pub const FENCE_DIR: &str = ".lease-fence";

/// The longest file name a file fence takes, in bytes: the fence's own names append up to 22
/// bytes to it, and a name on Linux filesystems holds at most 255.
pub const MAX_FILE_NAME_BYTES: usize = 200;

/// Fenced writes of the files in one directory (see the [module docs](self) for the steps and
/// what they guarantee).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("lease-fence-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// use lease_fence::file::FileFence;
///
/// let out = FileFence::new(&dir);
/// out.write("report.csv", 8, "day,total\n2026-12-07,42\n").await?; // token 8 writes
/// let refused = out.write("report.csv", 7, "stale\n").await.unwrap_err(); // a zombie's
/// assert!(refused.is_stale());
/// assert_eq!(std::fs::read_to_string(dir.join("report.csv"))?, "day,total\n2026-12-07,42\n");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FileFence {
    dir: PathBuf,
    compare: bool,
}

impl FileFence {
    /// Fenced writes of the files in `dir`, which must exist when writing. No I/O here; the
    /// first write creates `dir/.lease-fence/`.
    pub fn new(dir: impl Into<PathBuf>) -> FileFence {
        FileFence {
            dir: dir.into(),
            compare: true,
        }
    }

    /// Test support: the same fence with its check left out — a write replaces the file and
    /// sets its token whatever the fence holds, as a writer that does not compare tokens
    /// would. Tests use it to show that their zombie's write gets through without the check.
    /// Never use it for data.
    #[doc(hidden)]
    pub fn break_check_for_tests(mut self) -> FileFence {
        self.compare = false;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Replaces the file `file` of the directory with `contents` if `token` is at least the
    /// file's fence, and raises the fence to `token` (the steps are in the [module
    /// docs](self)). Runs on tokio's blocking pool.
    ///
    /// [`FenceError::Stale`] when a higher token has written the file (nothing changed);
    /// `InvalidArgument` for a token of 0 and `InvalidName` for a name that is not one plain
    /// file name of at most [`MAX_FILE_NAME_BYTES`] bytes (empty, `.`, `..`, with a `/` or a
    /// control character, or [`FENCE_DIR`]), before any I/O; `Backend` for a filesystem error,
    /// with the `io::Error` as its source and the path in the message.
    pub async fn write(
        &self,
        file: &str,
        token: u64,
        contents: impl Into<Vec<u8>>,
    ) -> Result<(), FenceError> {
        check_args(file, token)?;
        let this = self.clone();
        let file = file.to_owned();
        let contents = contents.into();
        tokio::task::spawn_blocking(move || this.write_blocking(&file, token, &contents))
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Panicked,
                    format!("the fenced file write did not finish: {e}"),
                )
            })?
    }

    /// [`write`](FileFence::write), on the calling thread: for code outside an async runtime
    /// (it blocks while another write of the same file holds the lock).
    pub fn write_blocking(
        &self,
        file: &str,
        token: u64,
        contents: &[u8],
    ) -> Result<(), FenceError> {
        check_args(file, token)?;
        let fences = self.dir.join(FENCE_DIR);
        match fs::create_dir(&fences) {
            Ok(()) => sync_dir(&self.dir)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create the fence folder", &fences, e).into()),
        }
        // 1. The contents, flushed, beside the fences (same filesystem as the file).
        let staged = Staged::write(&fences, file, contents)?;
        // 2. The lock.
        let lock_path = fences.join(format!("{file}.lock"));
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| io_err("open the fence lock", &lock_path, e))?;
        lock.lock()
            .map_err(|e| io_err("lock the fence", &lock_path, e))?;
        // 3. The check.
        let token_path = fences.join(format!("{file}.token"));
        let fence = read_token(&token_path)?;
        if let Some(fence) = fence.filter(|f| self.compare && token < *f) {
            return Err(FenceError::Stale(Stale::new(file, token, fence)));
        }
        // 4. The raise, durable before the data it guards; then the data.
        if fence != Some(token) {
            let raised = Staged::write(
                &fences,
                &format!("{file}.token"),
                token.to_string().as_bytes(),
            )?;
            raised.rename_to(&token_path)?;
            sync_dir(&fences)?;
        }
        let target = self.dir.join(file);
        staged.rename_to(&target)?;
        sync_dir(&self.dir)?;
        // 5. The lock goes with its file.
        drop(lock);
        Ok(())
    }

    /// The fence's token for `file`: the highest token that has written it, `None` before the
    /// first fenced write. For monitoring and tests: a write never needs it.
    pub fn token(&self, file: &str) -> Result<Option<u64>> {
        check_name(file)?;
        read_token(&self.dir.join(FENCE_DIR).join(format!("{file}.token")))
    }
}

/// The argument checks of a fenced write, before any I/O.
fn check_args(file: &str, token: u64) -> Result<()> {
    crate::check::token(token)?;
    check_name(file)
}

/// A fenced file's name: one plain name, not the fence folder's.
fn check_name(file: &str) -> Result<()> {
    crate::check::resource(file, MAX_FILE_NAME_BYTES)?;
    if file == "." || file == ".." || file == FENCE_DIR || file.contains('/') {
        return Err(Error::invalid_name(format!(
            "{file:?} is not a file name a file fence takes: give one plain name (no `/`, not \
             `.`, `..` or `{FENCE_DIR}`) and fence its directory (`FileFence::new(dir)`)"
        )));
    }
    Ok(())
}

/// The token in `path`; `None` when there is no such file.
fn read_token(path: &Path) -> Result<Option<u64>> {
    let mut text = String::new();
    match File::open(path).and_then(|mut f| f.read_to_string(&mut text)) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read the fence", path, e)),
    }
    match text.trim().parse::<u64>() {
        Ok(t) if t > 0 => Ok(Some(t)),
        _ => Err(Error::new(
            ErrorKind::Backend,
            format!(
                "the fence {} holds {:?}, which is not a token; something else wrote it",
                path.display(),
                text.chars().take(40).collect::<String>()
            ),
        )),
    }
}

/// A temporary file in the fence folder, removed when dropped unless renamed into place.
struct Staged {
    path: Option<PathBuf>,
}

impl Staged {
    /// `contents` in a new temporary file named after `name`, flushed to disk.
    fn write(fences: &Path, name: &str, contents: &[u8]) -> Result<Staged> {
        let hex = HolderToken::mint().to_hex();
        let path = fences.join(format!("{name}.{}.tmp", &hex[..16]));
        let mut staged = Staged { path: None };
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_err("create a temporary file", &path, e))?;
        staged.path = Some(path.clone());
        f.write_all(contents)
            .and_then(|()| f.sync_all())
            .map_err(|e| io_err("write a temporary file", &path, e))?;
        Ok(staged)
    }

    /// Renames the file to `target`, atomically replacing what is there.
    fn rename_to(mut self, target: &Path) -> Result<()> {
        let Some(path) = self.path.take() else {
            return Ok(());
        };
        if let Err(e) = fs::rename(&path, target) {
            let _ = fs::remove_file(&path);
            return Err(io_err("rename into place", target, e));
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = fs::remove_file(path);
        }
    }
}

/// Flushes a directory's entries (the renames in it) to disk.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("flush the directory", dir, e))
}

/// A filesystem error met while `doing` something to `path`.
fn io_err(doing: &str, path: &Path, e: io::Error) -> Error {
    let temporary = matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    );
    Error::backend(format!("{doing} {}", path.display()), e, temporary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_file_names_are_taken() {
        for bad in ["", ".", "..", "a/b", "/abs", FENCE_DIR, "a\nb"] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}");
        }
        assert!(check_name(&"x".repeat(MAX_FILE_NAME_BYTES)).is_ok());
        assert!(check_name(&"x".repeat(MAX_FILE_NAME_BYTES + 1)).is_err());
        assert!(check_name(".hidden.csv").is_ok());
    }
}
