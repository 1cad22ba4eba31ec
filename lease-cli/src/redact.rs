//! Keeping passwords out of every line `lease` writes.
//!
//! Each secret found in a store URL (its password, and values of password-like query
//! parameters, raw and percent-decoded) is registered here once; every line `lease` writes to
//! stderr — its own messages, clap's errors and the log — goes through [`scrub`].

use std::io::{self, Write};
use std::sync::{PoisonError, RwLock};

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers secrets to be replaced by `***` in all output from now on. Empty ones are ignored.
pub(crate) fn add_secrets<I, S>(secrets: I)
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut list = SECRETS.write().unwrap_or_else(PoisonError::into_inner);
    for s in secrets {
        let s = s.into();
        if !s.is_empty() && !list.contains(&s) {
            list.push(s);
        }
    }
    // Longest first, so a secret that contains another is replaced whole.
    list.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// `text` with every registered secret replaced by `***`.
pub(crate) fn scrub(text: &str) -> String {
    let list = SECRETS.read().unwrap_or_else(PoisonError::into_inner);
    let mut out = text.to_owned();
    for s in list.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "***");
        }
    }
    out
}

/// Writes one note of `lease`'s own (a line starting with `lease: `) to stderr, scrubbed, in
/// the log's format ([`crate::log::note`]).
pub(crate) fn eprintln_scrubbed(line: &str) {
    write_line_scrubbed(&crate::log::note(line));
}

/// Writes one line to stderr as it is, scrubbed.
pub(crate) fn write_line_scrubbed(line: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{}", scrub(line));
}

/// A log writer: buffers what the log writes and hands it to stderr scrubbed when dropped
/// (the log writes one event per writer).
#[derive(Debug, Default)]
pub(crate) struct ScrubbedStderr {
    buf: Vec<u8>,
}

impl Write for ScrubbedStderr {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for ScrubbedStderr {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buf);
        let _ = io::stderr().lock().write_all(scrub(&text).as_bytes());
    }
}

/// Makes a [`ScrubbedStderr`] per log event.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MakeScrubbedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for MakeScrubbedStderr {
    type Writer = ScrubbedStderr;

    fn make_writer(&'a self) -> ScrubbedStderr {
        ScrubbedStderr::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_longest_first() {
        add_secrets(["hunter2", "hunter2x", ""]);
        assert_eq!(scrub("pw hunter2x and hunter2"), "pw *** and ***");
        assert_eq!(scrub("nothing"), "nothing");
    }
}
