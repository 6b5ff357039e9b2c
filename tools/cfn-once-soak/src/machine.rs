//! The machine a soak runs on: its cores and load, and how busy the run kept it and moto.

/// The machine the soak ran on, and how busy the run kept it.
#[derive(Debug, Clone)]
pub struct Machine {
    pub cores: usize,
    pub cpu: String,
    pub memory_gib: f64,
    /// /proc/stat's (busy, total) jiffies when the run started.
    start: Option<(u64, u64)>,
    /// The moto server's pid, its CPU jiffies and the time when watching it started: moto is one
    /// Python process (one core at most), so it can be the limit while the machine is not.
    moto: Option<(u32, u64, std::time::Instant)>,
}

impl Machine {
    pub fn describe() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
            .map_or_else(|| std::env::consts::ARCH.to_owned(), |m| m.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        Self { cores, cpu, memory_gib: memory_kib / 1024.0 / 1024.0, start: cpu_jiffies(), moto: None }
    }

    /// Watches the moto server's CPU from now on (no pid: moto was started by someone else).
    pub fn watch_moto(&mut self, pid: Option<u32>) {
        self.moto = pid.and_then(|pid| Some((pid, process_jiffies(pid)?, std::time::Instant::now())));
    }

    /// The moto server's average CPU use since [`Machine::watch_moto`], in percent of one core.
    pub fn moto_core_percent(&self) -> Option<f64> {
        let (pid, start, since) = self.moto?;
        let used_s = process_jiffies(pid)?.saturating_sub(start) as f64 / CLOCK_TICKS_PER_S;
        let elapsed_s = since.elapsed().as_secs_f64();
        (elapsed_s > 0.0).then(|| used_s * 100.0 / elapsed_s)
    }

    /// "N% busy on average; moto M% of a core", what the report says of the machine.
    pub fn load_line(&self) -> String {
        let busy = self.busy_percent().map_or_else(|| "?".to_owned(), |b| format!("{b:.0}%"));
        match self.moto_core_percent() {
            Some(m) => format!("{busy} busy on average; moto (local AWS, one Python process) {m:.0}% of a core"),
            None => format!("{busy} busy on average"),
        }
    }

    pub fn one_line(&self) -> String {
        format!("{} cores ({}), {:.0} GiB", self.cores, self.cpu, self.memory_gib)
    }

    /// The machine's average CPU use since [`Machine::describe`], in percent.
    pub fn busy_percent(&self) -> Option<f64> {
        let (busy0, total0) = self.start?;
        let (busy1, total1) = cpu_jiffies()?;
        let total = total1.saturating_sub(total0);
        (total > 0).then(|| busy1.saturating_sub(busy0) as f64 * 100.0 / total as f64)
    }
}

/// (busy, total) from the first line of /proc/stat.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let values: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let total: u64 = values.iter().sum();
    // idle and iowait
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Linux's USER_HZ, the unit of /proc's CPU times (100 on every architecture Linux supports).
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// utime + stime of a process, from /proc/<pid>/stat (the fields after the parenthesised name).
fn process_jiffies(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // fields[0] is the state (field 3); utime and stime are fields 14 and 15.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}
