//! The snapshot archive (`get_snapshot_file` on TCP, `POST /snapshot` on HTTP): a ZIP of what an
//! operator sends with a bug report, section by section as the reference names them
//! (`filesystem_overview.txt`, `process_list.txt`, `resource_usage.txt`, `test.txt`,
//! `server_logs.txt`, `server_config.txt`), in the compression asked for (not lzma, which the
//! archive library cannot write: the node refuses it). The node decides who may
//! ask (`NodeEvent::SnapshotRequested`, `read_servers` or `manage_servers`); this module reads
//! files and runs `ps` and `top` on a thread of its own, never on a shard, and hands the archive
//! back through a channel the shard loop looks at each tick.
//!
//! Bounds: one collection at a time per process (another is refused with the reference's
//! `snapshot_file_completion_failed`, 9000); each section at most `SECTION_BYTES_MAX` (the logs
//! keep their newest bytes); the data directory listing at most `LISTED_ENTRIES_MAX` entries. A
//! section that cannot be read (no `ps` on the machine) is left out and logged, as the reference
//! does, and the rest still ship.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};

/// The reference's code for a snapshot it could not make (and for one asked while another runs).
pub const STATUS_SNAPSHOT_FAILED: u32 = 9000;
/// Bytes of one section at most.
pub const SECTION_BYTES_MAX: usize = 16 << 20;
/// Entries of the data directory listed at most.
pub const LISTED_ENTRIES_MAX: usize = 10_000;

static IN_PROGRESS: AtomicBool = AtomicBool::new(false);

/// Releases the one-at-a-time flag when the collecting thread ends, however it ends.
struct InProgress;

impl InProgress {
    fn acquire() -> Option<InProgress> {
        IN_PROGRESS.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok().then_some(InProgress)
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        IN_PROGRESS.store(false, Ordering::Release);
    }
}

/// Starts collecting `types` (valid codes, `node::snapshot_types`) from the node whose data
/// directory is `data`; the receiver gets the archive or the status refusing it.
pub fn start(data: PathBuf, compression: u8, types: Vec<u8>) -> Result<Receiver<Result<Vec<u8>, u32>>, u32> {
    let in_progress = InProgress::acquire().ok_or(STATUS_SNAPSHOT_FAILED)?;
    let (sender, receiver) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("vireo-snapshot".to_string())
        .spawn(move || {
            let _in_progress = in_progress;
            let _ = sender.send(collect(&data, compression, &types));
        })
        .map_err(|error| {
            tracing::error!(%error, "cannot start the snapshot's thread");
            STATUS_SNAPSHOT_FAILED
        })?;
    Ok(receiver)
}

/// The archive, made on the calling thread.
pub fn collect(data: &Path, compression: u8, types: &[u8]) -> Result<Vec<u8>, u32> {
    let started = std::time::Instant::now();
    let mut sections = Vec::new();
    for code in types {
        let name = section_name(*code);
        match section(data, *code) {
            Ok(mut content) => {
                if content.len() > SECTION_BYTES_MAX {
                    content.drain(..content.len() - SECTION_BYTES_MAX);
                }
                sections.push((format!("{name}.txt"), content));
            }
            Err(error) => tracing::error!(section = name, %error, "snapshot section left out"),
        }
    }
    let archive = zip(&sections, compression).map_err(|error| {
        tracing::error!(%error, "cannot write the snapshot archive");
        STATUS_SNAPSHOT_FAILED
    })?;
    tracing::info!(types = ?types, bytes = archive.len(), took_ms = started.elapsed().as_millis() as u64, "snapshot collected");
    Ok(archive)
}

fn section_name(code: u8) -> &'static str {
    match code {
        1 => "filesystem_overview",
        2 => "process_list",
        3 => "resource_usage",
        4 => "test",
        5 => "server_logs",
        _ => "server_config",
    }
}

fn section(data: &Path, code: u8) -> std::io::Result<Vec<u8>> {
    match code {
        1 => Ok(listing(data).into_bytes()),
        2 => {
            let mut content = b"=== Process list (ps aux) ===\n".to_vec();
            content.extend(Command::new("ps").arg("aux").output()?.stdout);
            content.extend(b"\n=== This process (/proc/self/status) ===\n");
            content.extend(std::fs::read("/proc/self/status").unwrap_or_default());
            Ok(content)
        }
        3 => {
            let mut content = Vec::new();
            for file in ["/proc/loadavg", "/proc/meminfo", "/proc/self/status", "/proc/self/io"] {
                content.extend(format!("=== {file} ===\n").into_bytes());
                content.extend(std::fs::read(file).unwrap_or_default());
            }
            // Threads by CPU, when the machine has top.
            if let Ok(top) = Command::new("top").args(["-H", "-b", "-n", "1"]).output() {
                content.extend(b"=== top -H -b -n 1 ===\n");
                content.extend(top.stdout);
            }
            Ok(content)
        }
        4 => Ok(b"test\n".to_vec()),
        5 => logs(&data.join("logs")),
        _ => std::fs::read(data.join("runtime").join("current_config.toml")),
    }
}

/// Every file under the data directory with its size, depth first, bounded.
fn listing(data: &Path) -> String {
    let mut lines = vec![format!("data directory {}", data.display())];
    let mut total = 0u64;
    let mut pending = vec![data.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else { continue };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|entry| entry.path());
        for entry in entries {
            if lines.len() > LISTED_ENTRIES_MAX {
                lines.push(format!("... more entries than {LISTED_ENTRIES_MAX}, not listed"));
                return lines.join("\n") + "\n";
            }
            let Ok(metadata) = entry.metadata() else { continue };
            let path = entry.path();
            let shown = path.strip_prefix(data).unwrap_or(&path).display().to_string();
            if metadata.is_dir() {
                lines.push(format!("{:>14}  {shown}/", "-"));
                pending.push(path);
            } else {
                total += metadata.len();
                lines.push(format!("{:>14}  {shown}", metadata.len()));
            }
        }
    }
    lines.push(format!("{total:>14}  bytes in files"));
    lines.join("\n") + "\n"
}

/// The log files, oldest first, keeping the newest `SECTION_BYTES_MAX` bytes: each file is read
/// from where the budget left by the newer ones begins, never whole.
fn logs(directory: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut files = Vec::new();
    for entry in std::fs::read_dir(directory)? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        if metadata.is_file() {
            files.push((metadata.modified()?, entry.path()));
        }
    }
    files.sort();
    let mut newest_first: Vec<Vec<u8>> = Vec::new();
    let mut budget = SECTION_BYTES_MAX as u64;
    for (_, path) in files.iter().rev() {
        if budget == 0 {
            break;
        }
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let from = len.saturating_sub(budget);
        file.seek(SeekFrom::Start(from))?;
        let mut tail = Vec::new();
        file.take(budget).read_to_end(&mut tail)?;
        budget -= tail.len() as u64;
        newest_first.push(tail);
    }
    Ok(newest_first.into_iter().rev().flatten().collect())
}

fn zip(sections: &[(String, Vec<u8>)], compression: u8) -> zip::result::ZipResult<Vec<u8>> {
    use zip::CompressionMethod as Method;
    let method = match compression {
        1 => Method::Stored,
        2 => Method::Deflated,
        3 => Method::Bzip2,
        4 => Method::Zstd,
        _ => Method::Xz,
    };
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(method).large_file(false);
    for (name, content) in sections {
        writer.start_file(name.as_str(), options)?;
        writer.write_all(content)?;
    }
    Ok(writer.finish()?.into_inner())
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn unzip(archive: &[u8]) -> Vec<(String, String)> {
        let mut reader = zip::ZipArchive::new(std::io::Cursor::new(archive)).expect("a ZIP archive");
        (0..reader.len())
            .map(|index| {
                let mut file = reader.by_index(index).unwrap();
                let mut text = String::new();
                file.read_to_string(&mut text).unwrap();
                (file.name().expect("a file name").to_string(), text)
            })
            .collect()
    }

    #[test]
    fn every_compression_makes_an_archive_of_the_sections_asked_for() {
        let data = std::env::temp_dir().join(format!("vireo-snapshot-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(data.join("logs")).unwrap();
        std::fs::create_dir_all(data.join("runtime")).unwrap();
        std::fs::write(data.join("logs/vireo-server.log"), "a line of log\n").unwrap();
        assert_eq!(logs(&data.join("logs")).unwrap(), b"a line of log\n");
        std::fs::write(data.join("runtime/current_config.toml"), "[tcp]\naddress = \"x\"\n").unwrap();
        // Every compression the node lets through (not lzma, 5: `node::snapshot_types`).
        for compression in [1, 2, 3, 4, 6] {
            let archive = collect(&data, compression, &[4, 5, 6, 1]).unwrap();
            let sections = unzip(&archive);
            let names: Vec<&str> = sections.iter().map(|(name, _)| name.as_str()).collect();
            assert_eq!(
                names,
                ["test.txt", "server_logs.txt", "server_config.txt", "filesystem_overview.txt"],
                "{compression}"
            );
            assert_eq!(sections[0].1, "test\n");
            assert_eq!(sections[1].1, "a line of log\n");
            assert!(sections[2].1.contains("address"));
            assert!(sections[3].1.contains("logs/vireo-server.log"), "{}", sections[3].1);
        }
        // A section that cannot be read is left out; the rest ship.
        std::fs::remove_dir_all(data.join("logs")).unwrap();
        let names: Vec<String> =
            unzip(&collect(&data, 2, &[5, 4]).unwrap()).into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["test.txt"]);
        let _ = std::fs::remove_dir_all(&data);
    }

    #[test]
    fn the_logs_keep_their_newest_bytes() {
        let directory = std::env::temp_dir().join(format!("vireo-snapshot-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        std::fs::write(directory.join("a.log"), "older file\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut newer = vec![b'x'; SECTION_BYTES_MAX];
        newer.extend_from_slice(b"the end\n");
        std::fs::write(directory.join("b.log"), &newer).unwrap();
        let kept = logs(&directory).unwrap();
        assert_eq!(kept.len(), SECTION_BYTES_MAX);
        assert!(kept.ends_with(b"the end\n"));
        assert!(!kept.windows(5).any(|window| window == b"older"));
        std::fs::write(directory.join("b.log"), "newer file\n").unwrap();
        assert_eq!(logs(&directory).unwrap(), b"older file\nnewer file\n");
        let _ = std::fs::remove_dir_all(&directory);
    }

    #[test]
    fn one_collection_at_a_time() {
        let held = InProgress::acquire().expect("free at first");
        assert_eq!(start(PathBuf::from("/nonexistent"), 1, vec![4]).unwrap_err(), STATUS_SNAPSHOT_FAILED);
        drop(held);
        let receiver = start(PathBuf::from("/nonexistent"), 1, vec![4]).expect("free again");
        let archive = receiver.recv().unwrap().unwrap();
        assert_eq!(unzip(&archive), [("test.txt".to_string(), "test\n".to_string())]);
    }
}
