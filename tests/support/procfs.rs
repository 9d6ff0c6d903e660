//! What the kernel says about processes and the machine, from `/proc`: a
//! process's state and group, a group's members, memory and CPU figures.

/// The fields of /proc/PID/stat after the command name (which may contain
/// spaces and ')'): index 0 is the state, 2 the process group, 11 utime.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    Some(
        stat.get(stat.rfind(')')? + 2..)?
            .split_whitespace()
            .collect(),
    )
}

/// Single-letter state from /proc/<pid>/stat ('T' = stopped, 'Z' = zombie).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_fields(&stat)?.first()?.chars().next()
}

/// The process group of `pid`.
pub fn pgid_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_fields(&stat)?.get(2)?.parse().ok()
}

/// Every process of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pgid_of(pid) == Some(pgid))
        .collect()
}

/// Processes whose command line holds `arg` exactly (e.g. a test's own
/// Chromium: its profile directory is unique to it).
pub fn processes_with_arg(arg: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// A field of /proc/PID/status in kB (`VmHWM`, `VmRSS`).
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// CPU seconds (user + system) this process has used, all threads.
pub fn self_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    let Some(f) = stat_fields(&stat) else {
        return f64::NAN;
    };
    // After the command: field 3 is index 0; utime is field 14, stime 15.
    let utime: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(f64::NAN);
    let stime: f64 = f.get(12).and_then(|x| x.parse().ok()).unwrap_or(f64::NAN);
    // USER_HZ is 100 on every Linux architecture tenure runs on.
    (utime + stime) / 100.0
}

/// Busy and total jiffies of the whole machine (/proc/stat, first line).
pub fn machine_jiffies() -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = s.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg writes them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Processes whose working directory is `dir` or lies under it (what a
/// harness started there: PostgreSQL runs in its data dir). Not this process.
pub fn processes_in_dir(dir: &std::path::Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .collect()
}
