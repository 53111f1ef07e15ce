//! The log backend (`--audit-log-path`): one JSON [`Event`] per line, written before the
//! request goes on (kube's `blocking` mode), to stdout (`-`) or to a file rotated as
//! lumberjack rotates kube-apiserver's: past `--audit-log-maxsize` megabytes the file is
//! renamed `audit-2026-11-24T03-30-00.000.log` (UTC) and a new one started; backups beyond
//! `--audit-log-maxbackup` or older than `--audit-log-maxage` days are removed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::AuditBackend;
use super::types::Event;

/// lumberjack's size when `--audit-log-maxsize` is 0.
const DEFAULT_MAX_BYTES: u64 = 100 * 1024 * 1024;
/// lumberjack's `backupTimeFormat`.
const BACKUP_TIME_FORMAT: &str = "%Y-%m-%dT%H-%M-%S%.3f";

/// Writes events as JSON lines.
pub struct LogBackend {
    out: Mutex<Box<dyn Write + Send>>,
}

impl LogBackend {
    /// Events to `out`, one a line.
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Self {
            out: Mutex::new(out),
        }
    }
}

impl AuditBackend for LogBackend {
    fn name(&self) -> &'static str {
        "log"
    }

    fn process(&self, event: &Event) {
        let mut line = match serde_json::to_vec(event) {
            Ok(line) => line,
            Err(e) => return super::plugin_error("log", &e, 1),
        };
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = out.write_all(&line).and_then(|()| out.flush()) {
            super::plugin_error("log", &e, 1);
        }
    }
}

/// A file rotated by size, with backups kept by count and age.
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    max_backups: usize,
    max_age: Option<Duration>,
    file: File,
    size: u64,
}

impl RotatingFile {
    /// Opens (appending) `path`, creating its directory; `max_megabytes` 0 means 100,
    /// `max_backups` and `max_age_days` 0 mean no limit.
    pub fn open(
        path: &Path,
        max_megabytes: u64,
        max_backups: usize,
        max_age_days: u64,
    ) -> std::io::Result<Self> {
        let max_bytes = match max_megabytes {
            0 => DEFAULT_MAX_BYTES,
            mb => mb * 1024 * 1024,
        };
        Self::with_bytes(path, max_bytes, max_backups, max_age_days)
    }

    /// As [`open`](Self::open) with the size in bytes.
    pub fn with_bytes(
        path: &Path,
        max_bytes: u64,
        max_backups: usize,
        max_age_days: u64,
    ) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path: path.to_path_buf(),
            max_bytes,
            max_backups,
            max_age: (max_age_days > 0).then(|| Duration::from_secs(max_age_days * 86_400)),
            file,
            size,
        })
    }

    /// The name a backup made now gets: `{stem}-{time}.{ext}`.
    fn backup_name(&self) -> PathBuf {
        let (prefix, ext) = self.prefix_and_ext();
        let time = jiff::Timestamp::now().strftime(BACKUP_TIME_FORMAT);
        self.path.with_file_name(format!("{prefix}{time}{ext}"))
    }

    fn prefix_and_ext(&self) -> (String, String) {
        let stem = self.path.file_stem().unwrap_or_default().to_string_lossy();
        let ext = match self.path.extension() {
            Some(ext) => format!(".{}", ext.to_string_lossy()),
            None => String::new(),
        };
        (format!("{stem}-"), ext)
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        std::fs::rename(&self.path, self.backup_name())?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        self.remove_old_backups()
    }

    /// lumberjack's `millRun`: keeps the newest `max_backups`, none older than `max_age`.
    fn remove_old_backups(&self) -> std::io::Result<()> {
        let mut backups = self.backups()?;
        backups.sort_by_key(|b| std::cmp::Reverse(b.0));
        let now = SystemTime::now();
        for (i, (time, path)) in backups.iter().enumerate() {
            let too_many = self.max_backups > 0 && i >= self.max_backups;
            let too_old = self
                .max_age
                .is_some_and(|age| now.duration_since(*time).unwrap_or_default() > age);
            if too_many || too_old {
                std::fs::remove_file(path)?;
            }
        }
        Ok(())
    }

    /// The backups beside the file, with the time in their names.
    fn backups(&self) -> std::io::Result<Vec<(SystemTime, PathBuf)>> {
        let (prefix, ext) = self.prefix_and_ext();
        let dir = match self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => dir.to_path_buf(),
            None => PathBuf::from("."),
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let Some(time) = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(&ext))
            else {
                continue;
            };
            let parsed = jiff::civil::DateTime::strptime(BACKUP_TIME_FORMAT, time)
                .ok()
                .and_then(|dt| dt.to_zoned(jiff::tz::TimeZone::UTC).ok());
            if let Some(zoned) = parsed {
                found.push((SystemTime::from(zoned.timestamp()), path));
            }
        }
        Ok(found)
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let len = buf.len() as u64;
        if len > self.max_bytes {
            return Err(std::io::Error::other(format!(
                "write length {len} exceeds maximum file size {}",
                self.max_bytes
            )));
        }
        if self.size + len > self.max_bytes {
            self.rotate()?;
        }
        let n = self.file.write(buf)?;
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn files_rotate_past_the_size_and_old_backups_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/audit.log");
        let mut file = RotatingFile::with_bytes(&path, 100, 2, 0).unwrap();
        for i in 0..5 {
            // Each write of 60 bytes leaves no room for the next: a new file each time.
            file.write_all(&[b'a' + i; 60]).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let names = names(&dir.path().join("logs"));
        assert_eq!(names.len(), 3, "the file and two backups: {names:?}");
        assert_eq!(names[2], "audit.log");
        for backup in &names[..2] {
            // audit-2026-11-24T03-30-00.000.log
            assert!(
                backup.starts_with("audit-") && backup.ends_with(".log"),
                "{backup}"
            );
            assert_eq!(
                backup.len(),
                "audit-2026-11-24T03-30-00.000.log".len(),
                "{backup}"
            );
        }
        // The newest backups are kept: `d`, then the current file `e`.
        let newest = std::fs::read(dir.path().join("logs").join(&names[1])).unwrap();
        assert_eq!(newest, [b'd'; 60]);
        assert_eq!(std::fs::read(&path).unwrap(), [b'e'; 60]);
        // A write larger than the whole file is refused, as lumberjack does.
        assert!(file.write(&[0; 101]).is_err());
    }

    #[test]
    fn backups_older_than_max_age_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let old = dir.path().join("audit-2001-01-01T00-00-00.000.log");
        std::fs::write(&old, "old").unwrap();
        let mut file = RotatingFile::with_bytes(&path, 10, 0, 1).unwrap();
        file.write_all(b"12345678").unwrap();
        file.write_all(b"12345678").unwrap();
        assert!(!old.exists());
        assert_eq!(names(dir.path()).len(), 2);
    }
}
