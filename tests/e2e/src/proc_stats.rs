//! What the benchmarks read of a process from `/proc`: its CPU time, its memory and what
//! it wrote.

/// CPU time (user + system) of process `pid`, in seconds; 0 when it cannot be read.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// A `/proc/PID/status` memory line in MiB (`VmRSS:`, `VmHWM:`); 0 when it cannot be read.
pub fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// What process `pid` has written so far (`/proc/PID/io`): bytes sent to the storage
/// layer and write system calls; zeros when it cannot be read.
#[derive(Debug, Default, Clone, Copy)]
pub struct Writes {
    /// `write_bytes`: bytes the process caused to be written to storage.
    pub bytes: u64,
    /// `syscw`: write system calls (`write`, `pwrite`, …).
    pub calls: u64,
}

/// See [`Writes`].
pub fn writes(pid: u32) -> Writes {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let field = |name: &str| {
        io.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Writes {
        bytes: field("write_bytes:"),
        calls: field("syscw:"),
    }
}
