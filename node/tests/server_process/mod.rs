//! A vireo-server process for the tests: started on free loopback ports (port 0, read back from
//! its banner) with its own data directory, killed when dropped. Its output is drained into a
//! buffer so the pipes never fill, and every wait is bounded.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const SERVER: &str = env!("CARGO_BIN_EXE_vireo-server");
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Server {
    child: Option<Child>,
    pub data: PathBuf,
    pub address: SocketAddr,
    pub metrics: Option<SocketAddr>,
    output: Arc<Mutex<String>>,
    /// The threads reading its stdout and stderr: joined once it exits, so `output` is whole.
    drains: Vec<std::thread::JoinHandle<()>>,
}

/// A fresh directory under the target directory's tmp (removed first if a run left it).
pub fn data_dir(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&path);
    path
}

fn drain(
    reader: impl Read + Send + 'static,
    output: Arc<Mutex<String>>,
    banner: Option<std::sync::mpsc::Sender<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if let Some(banner) = &banner {
                let _ = banner.send(line.clone());
            }
            let mut output = output.lock().unwrap();
            output.push_str(&line);
            output.push('\n');
        }
    })
}

impl Server {
    /// Starts a server on `data` with default root credentials and `env` (VIREO_ variables).
    pub fn start(data: &Path, env: &[(&str, &str)]) -> Server {
        Server::start_with(data, env, &["--with-default-root-credentials"])
    }

    pub fn start_with(data: &Path, env: &[(&str, &str)], args: &[&str]) -> Server {
        Server::start_limited(data, env, args, None)
    }

    /// As `start_with`, with at most `files_max` open file descriptors (`ulimit -n`) when given.
    pub fn start_limited(data: &Path, env: &[(&str, &str)], args: &[&str], files_max: Option<u64>) -> Server {
        let mut command = Command::new(SERVER);
        if let Some(files_max) = files_max {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit(2) only, between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit { rlim_cur: files_max, rlim_max: files_max };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        command
            .args(args)
            .env("VIREO_SYSTEM_PATH", data)
            .env("VIREO_TCP_ADDRESS", "127.0.0.1:0")
            .env("VIREO_HTTP_ADDRESS", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("vireo-server starts");
        let output = Arc::new(Mutex::new(String::new()));
        let (banner, lines) = std::sync::mpsc::channel();
        let drains = vec![
            drain(child.stdout.take().unwrap(), output.clone(), Some(banner)),
            drain(child.stderr.take().unwrap(), output.clone(), None),
        ];
        let deadline = Instant::now() + START_TIMEOUT;
        let (mut address, mut metrics) = (None, None);
        // The banner names the data directory after the addresses.
        let mut banner_done = false;
        while !banner_done {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("listening on ") {
                        address = rest.split(' ').next().and_then(|text| text.parse().ok());
                    }
                    if let Some(rest) =
                        line.strip_prefix("metrics on http://").or_else(|| line.strip_prefix("metrics on https://"))
                    {
                        metrics = rest.split('/').next().and_then(|text| text.parse().ok());
                    }
                    banner_done = line.starts_with("data directory ");
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!("vireo-server did not start: {}", output.lock().unwrap());
                }
            }
        }
        Server { child: Some(child), data: data.to_path_buf(), address: address.unwrap(), metrics, output, drains }
    }

    /// A server this test did not start (nothing to kill): `VIREO_SERVER_ADDRESS`, when set.
    pub fn external() -> Option<Server> {
        let address = std::env::var("VIREO_SERVER_ADDRESS").ok()?;
        let address = address.parse().expect("VIREO_SERVER_ADDRESS is host:port");
        let output = Arc::new(Mutex::new(String::new()));
        Some(Server { child: None, data: PathBuf::new(), address, metrics: None, output, drains: Vec::new() })
    }

    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// After the exit: the last lines it wrote are read (the pipes end with the process).
    fn join_drains(&mut self) {
        for drain in self.drains.drain(..) {
            let _ = drain.join();
        }
    }

    /// SIGKILL, and waits for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` and waits (bounded) for the exit.
    pub fn stop(&mut self, signal: i32, timeout: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, signal) };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.join_drains();
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (bounded) for the process to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut()?.try_wait().unwrap() {
                self.child = None;
                self.join_drains();
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process's resident memory now, in bytes (`VmRSS`).
    pub fn rss_bytes(&self) -> u64 {
        rss_bytes(self.pid())
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| child.try_wait().unwrap().is_none())
    }

    /// The `/metrics` text.
    pub fn metrics(&self) -> String {
        use std::io::Write;
        let address = self.metrics.expect("metrics enabled");
        let mut stream = std::net::TcpStream::connect(address).expect("metrics port");
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\nhost: vireo\r\nconnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        text.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
    }

    /// The value of one sample of `/metrics` (the sum over shards when labelled by shard).
    pub fn metric(&self, name_and_labels: &str) -> u64 {
        let text = self.metrics();
        let exact: u64 = text
            .lines()
            .filter(|line| line.split(' ').next() == Some(name_and_labels))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        let by_shard: u64 = text
            .lines()
            .filter(|line| line.starts_with(&format!("{name_and_labels}{{shard=")))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        exact + by_shard
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs vireo-server to its exit with `args` and `env`; returns its status and stderr.
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut command = Command::new(SERVER);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("vireo-server starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
            return (status, stderr);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("vireo-server {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of the sample named exactly `name_and_labels` in a `/metrics` text (0 if absent).
pub fn sample(text: &str, name_and_labels: &str) -> u64 {
    text.lines()
        .filter(|line| line.split(' ').next() == Some(name_and_labels))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// An Iggy SDK client of `address` that does not reconnect by itself (the tests decide).
pub fn sdk_client(address: SocketAddr) -> iggy::prelude::IggyClient {
    iggy::prelude::IggyClient::builder()
        .with_tcp()
        .with_server_address(address.to_string())
        .with_reconnection_max_retries(Some(0))
        .build()
        .expect("a client")
}

/// A client logged in as the default root once the server answers (tried for 30 s at most).
pub async fn root_client(address: SocketAddr) -> iggy::prelude::IggyClient {
    use iggy::prelude::*;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let client = sdk_client(address);
        let ready = async {
            client.connect().await?;
            client.login_user(DEFAULT_ROOT_USERNAME, DEFAULT_ROOT_PASSWORD).await?;
            client.get_streams().await
        };
        match tokio::time::timeout(Duration::from_secs(5), ready).await {
            Ok(Ok(_)) => return client,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("the server did not answer: {other:?}"),
        }
    }
}

/// A process's resident memory in bytes (`VmRSS` of `/proc/<pid>/status`; 0 once it is gone).
pub fn rss_bytes(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}
