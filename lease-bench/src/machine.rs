//! What the figures were measured on: processors, CPU model, memory, the CPUs this process may
//! run on, and the server versions.

use std::fmt::Write as _;

/// The machine, as the report shows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Machine {
    /// Online processors.
    pub(crate) nproc: usize,
    /// `model name` from /proc/cpuinfo.
    pub(crate) cpu: String,
    /// `MemTotal` from /proc/meminfo, in GiB.
    pub(crate) mem_gib: f64,
    /// `Cpus_allowed_list` of this process (the `taskset` pinning).
    pub(crate) cpus_allowed: String,
    /// Kernel release.
    pub(crate) kernel: String,
}

impl Machine {
    /// Reads /proc.
    pub(crate) fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".to_owned());
        let nproc = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = field(&meminfo, "MemTotal")
            .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0.0);
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let cpus_allowed = field(&status, "Cpus_allowed_list").unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned();
        Machine {
            nproc,
            cpu,
            mem_gib: mem_kib / (1024.0 * 1024.0),
            cpus_allowed,
            kernel,
        }
    }

    /// One markdown line.
    pub(crate) fn describe(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{} vCPU ({}), {:.1} GiB memory, Linux {}; benchmark process allowed on CPU(s) {}",
            self.nproc, self.cpu, self.mem_gib, self.kernel, self.cpus_allowed
        );
        s
    }
}

fn field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}
