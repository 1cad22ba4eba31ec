//! The command line: subcommands, options and help texts.

use std::ffi::OsString;

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::exit::Exit;
use crate::store_url::{STORE_VAR, default_store_help};

/// `lease`: a cluster-wide flock, leader-only daemons, and a view of who holds what.
#[derive(Debug, Parser)]
#[command(
    name = "lease",
    version,
    disable_help_subcommand = true,
    about = "A cluster-wide flock, leader-only daemons, and a view of who holds what.",
    long_about = "A cluster-wide flock, leader-only daemons, and a view of who holds what.\n\n\
        Processes that share a store agree that at most one of them holds a name at a time, and \
        each holding gets a fencing token (the term) that strictly increases every time the name \
        changes hands."
)]
pub(crate) struct Cli {
    /// The store, by URL: sqlite://PATH, postgres://…, mysql://… (mariadb://…), redis://…,
    /// mongodb://…, nats://…, etcd://… [default: a per-user SQLite file that excludes only
    /// this user on this host; see `lease help stores`]
    #[arg(
        long,
        global = true,
        env = STORE_VAR,
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) store: Option<String>,

    #[command(flatten)]
    pub(crate) observe: crate::observe::ObserveArgs,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run CMD only while holding NAME: a cluster-wide flock.
    #[command(long_about = RUN_ABOUT)]
    Run(RunArgs),
    /// Campaign for NAME forever and run CMD while leader: a leader-only daemon.
    #[command(long_about = ELECT_ABOUT)]
    Elect(ElectArgs),
    /// Run CMD once per instant of a schedule across all hosts: a cluster-wide cron.
    #[command(long_about = crate::commands::cron::CRON_ABOUT)]
    Cron(CronArgs),
    /// Show who holds each NAME: holder instance, term, time left.
    #[command(long_about = STATUS_ABOUT)]
    Status(StatusArgs),
    /// Print one line per change of each NAME's holder, until stopped.
    #[command(long_about = WATCH_ABOUT)]
    Watch(WatchArgs),
    /// Show the live members of SERVICE: node id, address, groups, time left.
    #[command(long_about = MEMBERS_ABOUT)]
    Members(MembersArgs),
    /// Show the live partition leases of GROUP: partition, owner, epoch, time left.
    #[command(long_about = OWNERS_ABOUT)]
    Owners(OwnersArgs),
    /// Break a lease (an administrator's tool; UNSAFE, needs --force).
    #[command(long_about = RELEASE_ABOUT)]
    Release(ReleaseArgs),
    /// Write under a fence: a SQL statement, a Redis write or a file, refused (exit 76) when a
    /// newer term has written there.
    #[command(long_about = FENCE_ABOUT)]
    Fence(FenceArgs),
    /// Print the help of a subcommand, or of a topic shared by all: stores, exit-codes.
    #[command(long_about = HELP_ABOUT)]
    Help(HelpArgs),
    /// Internal: the parent of CMD, which ends CMD and all its descendants at the local
    /// deadline, on request, and when `lease` dies.
    #[command(name = "__watchdog", hide = true)]
    Watchdog(WatchdogArgs),
    /// Internal: starts CMD for `lease` (tied to its parent's life).
    #[command(name = "__exec", hide = true)]
    Exec(ExecArgs),
}

const RUN_ABOUT: &str = "Run CMD only while holding NAME: a cluster-wide flock.\n\n\
    CMD gets LEASE_NAME, LEASE_TERM (the fencing token) and LEASE_INSTANCE in its environment. \
    Without --wait, lease exits at once with code 75 when someone else holds NAME; with --wait it \
    waits until it gets NAME, with --wait-timeout D for at most D (then it exits as without \
    --wait). --conflict-exit N makes that exit N instead of 75 (flock's -E), and --quiet makes it \
    silent: for cron and systemd, where only one host of many is meant to run CMD.\n\n\
    With --permits N, NAME is a counted lease: at most N CMDs run at once, each holding one \
    permit (the lowest free one, 0 to N-1, in LEASE_PERMIT) with a LEASE_TERM above every term \
    issued for NAME before, across all its permits. Every caller of NAME must give the same N \
    (or none): a claim that finds NAME held plainly while it asks for a permit, held by permit \
    while it asks plainly, or a permit past its own N live, is released and refused before CMD \
    starts (exit 64, naming both callers); of two such callers that start at once, at least one \
    is refused. So a changed N takes over as callers move to it: nobody is stopped, and callers \
    with a smaller N are refused while a permit past it is live. All N permits held counts as \
    NAME held.\n\n\
    A waiting lease claims again when the store hints a release (within \
    milliseconds on stores that send hints), when the holder's lease runs out by the store's \
    clock, and, where the store sends no hints, every campaign retry (2/15 of the TTL) plus \
    jitter. While CMD runs the lease is renewed; when the lease is lost, \
    CMD's process group and every descendant of CMD get SIGTERM (each process once), then \
    SIGKILL after the step-down grace (4/15 of the TTL), and lease exits 74. SIGINT, SIGTERM and SIGHUP are \
    forwarded to CMD's process group; the lease is released once CMD has exited (what is left \
    of the term is then ended as on a loss, except that after a forwarded SIGTERM the group gets \
    no second one: each process gets each signal once), and lease exits with CMD's code (143 \
    when CMD dies of the SIGTERM); a stop signal before CMD started exits 72. Otherwise lease \
    exits with CMD's code.\n\n\
    CMD runs in its own process group (so it cannot read from a terminal) under a watchdog \
    process that is CMD's parent and a child subreaper, so every descendant of CMD stays in \
    its care, also after setsid or a double fork. The watchdog ends CMD and every descendant \
    (SIGTERM, then SIGKILL after the grace) at the term's local deadline (10/15 of the TTL \
    after the last renewal, on the boot clock) on its own, so CMD never runs on after the \
    lease could have passed to someone else, even when lease is frozen (SIGSTOP) or starved; \
    when lease dies, even by kill -9, it SIGKILLs them all at once. Ctrl-Z (SIGTSTP) stops \
    CMD and every descendant, then lease; on SIGCONT they continue only if the term is still \
    live, and otherwise lease stops them as on a loss. Once CMD exits, whatever remains of its \
    descendants gets SIGTERM, then SIGKILL after the grace, and only when none is left is the \
    lease released.\n\n\
    What escapes: processes that are not descendants of CMD — work CMD hands to another \
    process to start (systemd-run, at, a container engine's daemon, ssh to another host, any \
    server); and, when the watchdog itself is SIGKILLed (CMD then dies with it), the \
    descendants that left CMD's process group are killed by lease only if lease is running: \
    if lease dies at the same time (pkill -9 lease, the OOM killer) they are re-parented to \
    init and survive; if lease is stopped, they run until it continues. Linux only.";

const ELECT_ABOUT: &str = "Campaign for NAME forever and run CMD while leader: a leader-only \
    daemon.\n\n\
    When CMD exits or the lease is lost, lease releases NAME and campaigns again. When CMD keeps \
    failing (non-zero exit), each further campaign waits longer: the campaign retry doubled per \
    failure in a row, up to 60s, reset when CMD exits 0 or has run for 60s. CMD gets the same \
    environment and supervision as with `lease run`: every descendant of CMD is ended before \
    the name is released and the next campaign starts, so no term's workers outlive it, and \
    what escapes is the same. SIGINT, SIGTERM and SIGHUP stop it: forwarded to CMD when it \
    runs (lease then exits with CMD's code: 143 when CMD dies of the SIGTERM of a systemctl \
    stop), exit 72 otherwise (a follower, or a leader between terms); `lease help exit-codes` \
    gives the SuccessExitStatus= line for a systemd unit. It says on stderr when it becomes \
    leader and when CMD ends; --quiet leaves those lines out.";

const HELP_ABOUT: &str = "Print the help of a subcommand, or of a topic shared by all.\n\n\
    \x20 lease help stores       the store URLs, the default per-user store, and what each \
    store needs\n\
    \x20 lease help exit-codes   every exit code of lease, and those of a stop by a signal \
    (systemctl stop)\n\
    \x20 lease help SUBCOMMAND   the same as lease SUBCOMMAND --help";

const STATUS_ABOUT: &str = "Show who holds each NAME: holder instance, term, time left.\n\n\
    With --prefix P instead of NAMEs: every name the store keeps a record of that starts with P \
    (byte for byte; no character of P is special), in byte order, at most 10000 (past that the \
    first 10000 are shown and a line on stderr says more were left out; narrow P). Which names \
    have a record is the store's: SQL stores, Redis, MongoDB and the memory store keep every \
    name ever claimed (held or not); etcd and NATS only those held now. Redis Cluster is \
    refused (SCAN sees one node). The term shown is the last one issued, also when nobody holds \
    the name now; '-' means none. Times are by the store's clock.\n\n\
    A counted name (lease run --permits N) shows one row per permit, with its number in the \
    PERMIT column: the permit's holder, last term and time left. With --json its object gets \
    \"permits_held\" (how many of its permits are live) and a \"permits\" array: permit, held, \
    holder, term, expires_in_ms per permit; the name's \"held\" is true when its plain lease \
    or any permit is held (holder, term and expires_in_ms stay those of the plain lease).";

const WATCH_ABOUT: &str = "Print one line per change of each NAME's holder, until stopped.\n\n\
    First, for each NAME nobody holds (neither its lease nor a permit), a 'free' line; then one \
    line per change: claimed (holder, \
    term, time left), released (the holder ended its term before its lease ran out) or expired \
    (the store's clock passed the lease's expiry without a renewal: the holder crashed, hung or \
    was cut off). A name held at the start shows as claimed. Every line is read from the store, \
    by the store's clock; the store's hints (where it sends them) only make lease read sooner, \
    and where it sends none lease reads every 2 to 2.5 s and at each holder's expiry. Changes \
    between two reads are coalesced: a holder that came and went between them is not shown, \
    and a release seen after the holder's expiry shows as expired.\n\n\
    Each line starts with the time lease read the change (this host's wall clock, RFC 3339 in \
    UTC); a claim also gives its expiry as a time: the read's time plus what the store said \
    was left, which is its holder's lease as the store sees it.\n\n\
    \x20 2026-12-07T13:45:01.123Z job: free (last term 6)\n\
    \x20 2026-12-07T13:45:02.417Z job: claimed by web-1 (term 7, expires in 14.9s at \
    2026-12-07T13:45:17.317Z)\n\
    \x20 2026-12-07T13:45:09.020Z job: released (term 7)\n\
    \x20 2026-12-07T13:46:30.005Z job: expired (term 8): the holder stopped renewing\n\n\
    A counted name (lease run --permits N) gets the same lines per permit, each naming the \
    permit and how many of the name's permits were held at that read; its live permits at the \
    start show as claimed:\n\n\
    \x20 2026-12-07T13:45:02.417Z pool: permit 1 claimed by web-2 (term 9, expires in 14.9s \
    at 2026-12-07T13:45:17.317Z); 2 permits held\n\
    \x20 2026-12-07T13:45:09.020Z pool: permit 0 released (term 8); 1 permit held\n\n\
    With --json, one JSON object per line: time (as above), name, event (free, claimed, \
    released, expired), holder (null unless claimed), term (the last one issued; null when \
    never claimed), expires_in_ms and expires_at (the expiry as a time; both null unless \
    claimed); a permit's object also has permit (after name) and permits_held (last). SIGINT, \
    SIGTERM and SIGHUP end it with code 0.";

const MEMBERS_ABOUT: &str = "Show the live members of SERVICE: node id, address, groups, time \
    left.\n\n\
    The members are the nodes whose heartbeats for SERVICE (e.g. from a GroupWorker) are live by \
    the store's clock: a node drops out when its TTL runs out without a heartbeat, or at once \
    when it leaves. One line per member, by node id (byte order), under a header; columns are \
    separated by two spaces or more:\n\n\
    \x20 NODE    ADDRESS        GROUPS       EXPIRES IN\n\
    \x20 node-a  10.0.0.7:8080  orders,mail  12.4s\n\
    \x20 node-b  -              orders       3.1s\n\n\
    GROUPS lists the partition groups the node serves, comma-separated; '-' means an empty \
    address or no groups. EXPIRES IN is the time left on the heartbeat. With no live member, \
    nothing is printed (--json prints []), a note goes to stderr and lease exits 0. On NATS \
    the records are those of the bucket for 15s leases, or of the one ?bucket=NAME names.";

const OWNERS_ABOUT: &str = "Show the live partition leases of GROUP: partition, owner, epoch, \
    time left.\n\n\
    One line per partition whose lease is live by the store's clock, by partition number, under \
    a header; columns are separated by two spaces or more:\n\n\
    \x20 PARTITION  OWNER                    EPOCH  EXPIRES IN\n\
    \x20 0          node-a@3f9c0e1d2b4a5968  4      14.2s\n\
    \x20 1          node-b@0a1b2c3d4e5f6071  2      14.2s\n\n\
    OWNER is the owning process incarnation (its node id, '@', an id minted at its start); EPOCH \
    is the partition's fencing token, which increases every time the partition changes hands. \
    Partitions nobody holds live are not listed. With no live lease, nothing is printed (--json \
    prints []), a note goes to stderr and lease exits 0. On NATS the records are those of the \
    bucket for 15s leases, or of the one ?bucket=NAME names.";

const RELEASE_ABOUT: &str = "Break a lease: an administrator's tool. UNSAFE.\n\n\
    Ends whoever's live lease on NAME at once. The holder may still be working: it finds out at \
    its next renewal and stops its work within its step-down grace, so for a short while two \
    holders may work. The record and its term are kept, so the next claim still gets a higher \
    term and fenced resources refuse the old holder. Requires --force.";

const FENCE_ABOUT: &str = "Write under a fence: a SQL statement, a Redis write or a file, \
    refused when a newer term has written there.\n\n\
    A lease cannot stop a holder that was paused (SIGSTOP, a stopped VM, a slow disk) from \
    writing after its term passed to someone else; the resource it writes to can. A fence keeps, \
    next to the data, the highest token that has written a resource, and checks it in the same \
    atomic operation as the write: a lower token is refused and nothing is written; an equal \
    one writes (one term, many writes); a higher one raises the fence and writes.\n\n\
    \x20 lease fence sql URL -- 'STATEMENT' [...]   the statements and the check in one \
    transaction (postgres://, mysql://, mariadb://, sqlite://)\n\
    \x20 lease fence redis URL set KEY VALUE        one command and the check in one script (also \
    hset KEY FIELD VALUE, del KEY...)\n\
    \x20 lease fence file PATH < CONTENTS           PATH replaced whole by an atomic rename under \
    the check (one host, local filesystem)\n\n\
    Inside `lease run NAME` (or `lease elect NAME`) nothing else is needed: the token defaults \
    to LEASE_TERM and the resource to NAME (NAME#permit-N under --permits, as each permit \
    must have a fence of its own). Outside, give --token and --resource. The fences are those \
    of the lease-fence crate (same table, key prefix and files), so a program and a script \
    fence the same resource together. Guard each resource with one lease name: tokens of two \
    names are unrelated numbers.\n\n\
    Prints nothing on success. A refusal exits 76 with one line on stderr, \
    `lease: refused: resource R has seen token F > T; stop ...`, and changes nothing: the \
    script must stop working under that term. A token of 0 or one that is not a number exits \
    64, a bad resource name 65.";

const FENCE_SQL_ABOUT: &str = "Run SQL statements under a fence, in one transaction.\n\n\
    Opens a transaction on URL whose first statement checks TOKEN against the fence of \
    RESOURCE and raises it (one upsert on the fence table, which is created when missing), \
    then runs each STATEMENT in order and commits. Refused: the transaction is rolled back \
    before any STATEMENT ran, exit 76. A STATEMENT that fails rolls everything back (the \
    fence too), exit 70. Each STATEMENT may hold several statements separated by ';'; no \
    results are printed. The fence row stays locked until the commit, so a newer term's \
    write waits for this one and then wins: committed writes are ordered by token.\n\n\
    The check holds only for what is written in this transaction, in this database.";

const FENCE_REDIS_ABOUT: &str = "Run one Redis write under a fence, in one script.\n\n\
    One Lua script reads the fence key of RESOURCE (PREFIX + RESOURCE, default \
    lease-fence:RESOURCE), refuses a lower token (exit 76, nothing run), runs the command, \
    and raises the fence only when the command succeeded. A failing command (say WRONGTYPE) \
    exits 70 and leaves the fence as it was. On Redis Cluster the keys must share the fence \
    key's slot (a hash tag in both). A restart without AOF, or a failover to a replica that \
    missed the raise, can lose a fence.";

const FENCE_FILE_ABOUT: &str = "Replace PATH with stdin under a fence.\n\n\
    Reads stdin to the end, writes it to a temporary file beside PATH (in PATH's directory's \
    .lease-fence/ folder) and flushes it, then, under a lock on PATH's fence, checks TOKEN, \
    raises the fence and renames the file over PATH. A reader sees the whole old or the whole \
    new file. Refused: PATH is untouched, exit 76. The fence is per file (its resource is \
    PATH's file name in its directory), so there is no --resource.\n\n\
    One host and a local filesystem only (not NFS, SMB or FUSE), and only among writers that \
    go through a fence (`lease fence file` or lease-fence's FileFence): a program that writes \
    PATH directly is not stopped. PATH's directory must exist.";

/// Options of `lease fence`.
#[derive(Debug, Args)]
pub(crate) struct FenceArgs {
    /// Where to write.
    #[command(subcommand)]
    pub(crate) what: FenceCommand,
}

/// The resources `lease fence` writes to.
#[derive(Debug, Subcommand)]
pub(crate) enum FenceCommand {
    /// Run SQL statements under a fence, in one transaction (PostgreSQL, MySQL/MariaDB,
    /// SQLite).
    #[command(long_about = FENCE_SQL_ABOUT)]
    Sql(FenceSqlArgs),
    /// Run one Redis write (set, hset, del) under a fence, in one script.
    #[command(long_about = FENCE_REDIS_ABOUT)]
    Redis(FenceRedisArgs),
    /// Replace a file with stdin under a fence (atomic rename; one host).
    #[command(long_about = FENCE_FILE_ABOUT)]
    File(FenceFileArgs),
}

/// The token a fenced write offers.
#[derive(Debug, Args)]
pub(crate) struct TokenArg {
    /// The fencing token to write under (a whole number, at least 1) [default: $LEASE_TERM,
    /// set by `lease run` and `lease elect`].
    #[arg(long, value_name = "TOKEN")]
    pub(crate) token: Option<String>,
}

/// The resource a fenced write names, and its token.
#[derive(Debug, Args)]
pub(crate) struct FenceOf {
    /// The resource whose fence guards the write (1 to 255 bytes, no control characters)
    /// [default: $LEASE_NAME, or $LEASE_NAME#permit-$LEASE_PERMIT under --permits].
    #[arg(long, value_name = "RESOURCE")]
    pub(crate) resource: Option<String>,

    #[command(flatten)]
    pub(crate) token: TokenArg,
}

/// Options of `lease fence sql`.
#[derive(Debug, Args)]
pub(crate) struct FenceSqlArgs {
    /// The database: postgres://…, mysql://… (mariadb://…) or sqlite://PATH (the file must
    /// exist).
    #[arg(value_name = "URL")]
    pub(crate) url: String,

    #[command(flatten)]
    pub(crate) of: FenceOf,

    /// The fence table, created when missing (a SQL identifier, optionally schema.table).
    #[arg(long, value_name = "TABLE", default_value = "lease_fences")]
    pub(crate) table: String,

    /// How long to keep trying to connect to the database before exiting 69.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub(crate) connect_timeout: String,

    /// The statements to run under the fence, after `--`: each argument one or more
    /// statements, run in order in the fence's transaction.
    #[arg(
        required = true,
        num_args = 1..,
        last = true,
        value_name = "STATEMENT"
    )]
    pub(crate) statements: Vec<String>,
}

/// Options of `lease fence redis`.
#[derive(Debug, Args)]
pub(crate) struct FenceRedisArgs {
    /// The server: redis://… or rediss://….
    #[arg(value_name = "URL")]
    pub(crate) url: String,

    #[command(flatten)]
    pub(crate) of: FenceOf,

    /// The prefix of the fence keys (the fence of RESOURCE is the key PREFIX + RESOURCE).
    #[arg(long, value_name = "PREFIX", default_value = "lease-fence:")]
    pub(crate) prefix: String,

    /// How long to wait for the connection to the server before exiting 69.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub(crate) connect_timeout: String,

    /// The write.
    #[command(subcommand)]
    pub(crate) write: RedisWrite,
}

/// The Redis writes `lease fence redis` runs.
#[derive(Debug, Subcommand)]
pub(crate) enum RedisWrite {
    /// SET KEY VALUE.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// HSET KEY FIELD VALUE.
    Hset {
        /// The key of the hash.
        key: String,
        /// The field.
        field: String,
        /// The value.
        value: String,
    },
    /// DEL KEY…
    Del {
        /// The keys to delete.
        #[arg(required = true, num_args = 1..)]
        keys: Vec<String>,
    },
}

/// Options of `lease fence file`.
#[derive(Debug, Args)]
pub(crate) struct FenceFileArgs {
    /// The file to replace with stdin; its directory must exist.
    #[arg(value_name = "PATH")]
    pub(crate) path: std::path::PathBuf,

    #[command(flatten)]
    pub(crate) token: TokenArg,
}

/// Options of `lease run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lease name (1 to 255 bytes on SQL stores, no control characters).
    pub(crate) name: String,

    #[command(flatten)]
    pub(crate) hold: HoldArgs,

    /// Campaign until NAME is free instead of exiting 75 at once.
    #[arg(long)]
    pub(crate) wait: bool,

    /// Wait at most DURATION for NAME (implies --wait), then exit as when NAME is held: 75, or
    /// the --conflict-exit code (flock's -w).
    #[arg(long, value_name = "DURATION")]
    pub(crate) wait_timeout: Option<String>,

    /// The exit code when NAME is held (without --wait, or after --wait-timeout) instead of 75,
    /// 0 to 255 (flock's -E); e.g. 0 so that losing hosts do not fail.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub(crate) conflict_exit: Option<String>,

    /// Print nothing when NAME is held (the losing hosts of a cron job stay silent), nor the
    /// note about the default store; errors are still printed.
    #[arg(long, short = 'q')]
    pub(crate) quiet: bool,

    /// Make NAME a counted lease: at most N holders at once (1 to 1024), each with a fencing
    /// token of its own. CMD also gets LEASE_PERMIT, the permit it holds (0 to N-1).
    #[arg(long, value_name = "N")]
    pub(crate) permits: Option<String>,

    /// The command to run, after `--`.
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub(crate) cmd: Vec<OsString>,
}

/// Options of `lease cron` (its help text is in `commands::cron`).
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["schedule", "every"])))]
pub(crate) struct CronArgs {
    /// The job's name: its lease name, the same on every host that runs the job.
    pub(crate) name: String,

    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week), 6 with
    /// seconds first, or @hourly, @daily, @weekly…
    #[arg(long, value_name = "EXPR")]
    pub(crate) schedule: Option<String>,

    /// The IANA time zone --schedule is read in, e.g. Europe/Berlin [default: UTC].
    #[arg(long, value_name = "ZONE")]
    pub(crate) tz: Option<String>,

    /// Instead of --schedule: every DURATION, at the multiples of it since the Unix epoch.
    #[arg(long, value_name = "DURATION")]
    pub(crate) every: Option<String>,

    /// How late an instant no host has run may still run.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    pub(crate) catch_up: String,

    /// One pass, then exit: run the instants due now (if no host has), for a crontab line or
    /// a systemd timer.
    #[arg(long)]
    pub(crate) once: bool,

    #[command(flatten)]
    pub(crate) hold: HoldArgs,

    /// The command to run for each instant, after `--`.
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub(crate) cmd: Vec<OsString>,
}

/// Options of `lease elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The lease name.
    pub(crate) name: String,

    #[command(flatten)]
    pub(crate) hold: HoldArgs,

    /// Leave out the lines on becoming leader and on CMD's end, and the note about the default
    /// store; errors are still printed.
    #[arg(long, short = 'q')]
    pub(crate) quiet: bool,

    /// The command to run while leader, after `--`.
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub(crate) cmd: Vec<OsString>,
}

/// How a lease is held: its duration and the holder's label.
#[derive(Debug, Args)]
pub(crate) struct HoldArgs {
    /// The lease duration, e.g. 15s, 500ms, 2m. The other timings scale with it (renew every
    /// 2/15, local deadline 10/15, step-down grace 4/15, campaign retry 2/15 plus jitter);
    /// refused when no safe timings fit.
    #[arg(long, value_name = "DURATION", default_value = "15s")]
    pub(crate) ttl: String,

    /// The label others see as the holder [default: host/pid/random].
    #[arg(long, value_name = "LABEL")]
    pub(crate) instance: Option<String>,
}

/// Options of `lease status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lease names to show (at least one, unless --prefix is given).
    #[arg(required_unless_present = "prefix", num_args = 1..)]
    pub(crate) names: Vec<String>,

    /// Show every name under PREFIX the store keeps a record of (plain leases and counted
    /// names), in byte order, instead of NAMEs. PREFIX is literal (no wildcard) and may be empty
    /// (every name).
    #[arg(long, value_name = "PREFIX", conflicts_with = "names")]
    pub(crate) prefix: Option<String>,

    /// Print JSON instead of a table: one object per name with name, held, holder, term and
    /// expires_in_ms (and, for a counted name, permits_held and permits: one object per
    /// permit).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `lease watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// The lease names to watch (at least one).
    #[arg(required = true, num_args = 1..)]
    pub(crate) names: Vec<String>,

    /// Print one JSON object per line instead of text: time, name, event, holder, term,
    /// expires_in_ms and expires_at (and, for a permit of a counted name, permit and
    /// permits_held).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `lease members`.
#[derive(Debug, Args)]
pub(crate) struct MembersArgs {
    /// The service whose members to show (a name, as for leases).
    pub(crate) service: String,

    /// Print JSON instead of a table: an array with one object per member with node, address,
    /// groups (an array) and expires_in_ms; [] when there is none.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `lease owners`.
#[derive(Debug, Args)]
pub(crate) struct OwnersArgs {
    /// The partition group whose leases to show (a name, as for leases).
    pub(crate) group: String,

    /// Print JSON instead of a table: an array with one object per live partition lease with
    /// partition, owner, epoch and expires_in_ms; [] when there is none.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Options of `lease release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The lease name.
    pub(crate) name: String,

    /// Confirm that you mean to break the lease while its holder may still be working.
    #[arg(long)]
    pub(crate) force: bool,
}

/// Options of `lease help`.
#[derive(Debug, Args)]
pub(crate) struct HelpArgs {
    /// A topic (stores, exit-codes) or a subcommand (e.g. run, or fence sql).
    #[arg(value_name = "TOPIC|SUBCOMMAND")]
    pub(crate) words: Vec<String>,
}

/// Options of the internal `__exec`.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The process id of the `lease` that started this one.
    #[arg(long)]
    pub(crate) parent: i32,

    /// The command to become.
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(crate) cmd: Vec<OsString>,
}

/// Options of the internal `__watchdog`.
#[derive(Debug, Args)]
pub(crate) struct WatchdogArgs {
    /// The abstract Unix socket name `lease` listens on for the watchdog.
    #[arg(long)]
    pub(crate) socket: String,

    /// The command to run for each term.
    #[arg(
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(crate) cmd: Vec<OsString>,
}

/// The text after the options in every `--help`: pointers to the store and the exit codes,
/// which `lease help stores` and `lease help exit-codes` give whole.
pub(crate) fn after_help() -> String {
    format!(
        "Store: --store URL, or {STORE_VAR}; without one, a per-user SQLite file that excludes \
         only this user on this host. See `lease help stores`.\n\
         Exit codes: lease's own are {}-{}, announced on stderr; CMD's are passed on. See \
         `lease help exit-codes`.",
        Exit::ALL[0].code(),
        Exit::ALL[Exit::ALL.len() - 1].code()
    )
}

/// The text of `lease help stores`: the store URLs, the default store and what each store needs.
pub(crate) fn stores_help() -> String {
    format!(
        "Stores:\n  --store URL, or {STORE_VAR}; default: {}\n  (one fixed file per user: \
         $XDG_STATE_HOME/lease/leases.db, else ~/.local/state/lease/leases.db, created when \
         missing).\n  The default store excludes only this user on this host: another user, or \
         the same command on another host, has a store of its own and runs at the same time. \
         lease says so on stderr each time it uses it (not with --quiet). To exclude across \
         hosts and users, give all of them the same shared store, e.g. \
         {STORE_VAR}=postgres://lease@db.example/lease.\n  Schemes: sqlite, postgres(ql), mysql, mariadb, redis(s), mongodb, nats; etcd when built with \
         --features etcd.\n  \
         NATS: one bucket per lease duration (leases_<ms>ms); ?bucket=NAME picks one.\n  Redis: run and elect need appendonly yes with appendfsync always; add \
         ?terms=clock_floor (safe while the server's clock never steps back), \
         ?allow_fsync_everysec=1 (appendfsync everysec) or ?allow_volatile=1 (unsafe) to accept \
         a server without it; commands that claim nothing need none.\n  Passwords in URLs are never printed.",
        default_store_help(),
    )
}

/// The clap command with the help texts that depend on the environment.
pub(crate) fn command() -> clap::Command {
    let after = after_help();
    let mut cmd = Cli::command().after_help(after.clone());
    for sub in [
        "run", "elect", "cron", "status", "watch", "members", "owners", "release",
    ] {
        let text = after.clone();
        cmd = cmd.mut_subcommand(sub, |s| s.after_help(text));
    }
    // `lease fence` writes to its URL or PATH, not to the store.
    let fence_after = format!(
        "--store and {STORE_VAR} are not used: the fence is in the database, server or \
         directory named on the command line.\n\
         Exit codes: {} refused, nothing written; {} the write failed; all: see `lease help \
         exit-codes`.",
        Exit::Stale.code(),
        Exit::StoreError.code()
    );
    cmd = cmd.mut_subcommand("fence", |f| f.after_help(fence_after.clone()));
    for sub in ["sql", "redis", "file"] {
        let text = fence_after.clone();
        cmd = cmd.mut_subcommand("fence", |f| f.mut_subcommand(sub, |s| s.after_help(text)));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn run_takes_cmd_after_dashes() {
        let m = command()
            .try_get_matches_from(["lease", "run", "job", "--wait", "--", "echo", "-n", "hi"])
            .unwrap();
        let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&m).unwrap();
        match cli.command {
            Command::Run(r) => {
                assert!(r.wait);
                assert_eq!(r.cmd, ["echo", "-n", "hi"]);
            }
            other => panic!("{other:?}"),
        }
    }
}
