//! The process's own CPU time, for the client-CPU line of a load run.

/// User + system CPU seconds this process has used so far (Linux `/proc/self/stat`, whose clock
/// ticks are USER_HZ = 100); `None` elsewhere.
pub fn process_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / 100.0)
}
