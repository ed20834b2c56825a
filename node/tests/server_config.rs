//! vireo-server refuses a configuration it cannot use with one line naming the key and the
//! reason, and a non-zero exit: a bad file, an unknown VIREO_ variable, a bad value, a port in use,
//! a data directory another server holds.

mod server_process;

use server_process::{data_dir, run_to_exit, Server};

fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|line| !line.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line, got: {stderr}");
    lines[0]
}

#[test]
fn a_bad_config_file_stops_the_server_with_one_line() {
    let dir = data_dir("config-bad-file");
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[tcp]\nadress = \"127.0.0.1:1\"\n").unwrap();
    let data = dir.join("data");
    let (status, stderr) =
        run_to_exit(&["--config", bad.to_str().unwrap()], &[("VIREO_SYSTEM_PATH", data.to_str().unwrap())]);
    assert!(!status.success());
    assert_eq!(one_line(&stderr), format!("vireo-server: config {}: unknown key `tcp.adress`", bad.display()));

    std::fs::write(&bad, "[tcp\n").unwrap();
    let (status, stderr) = run_to_exit(&["--config", bad.to_str().unwrap()], &[]);
    assert!(!status.success());
    assert!(one_line(&stderr).contains("line 1: not valid TOML"), "{stderr}");

    let (status, stderr) = run_to_exit(&["--config", dir.join("missing.toml").to_str().unwrap()], &[]);
    assert!(!status.success());
    assert!(one_line(&stderr).contains("cannot read the config file"), "{stderr}");

    let (status, stderr) = run_to_exit(&[], &[("VIREO_CONFIG_PATH", bad.to_str().unwrap())]);
    assert!(!status.success());
    assert!(one_line(&stderr).contains("not valid TOML"), "{stderr}");
}

#[test]
fn an_unknown_or_bad_environment_variable_stops_the_server_with_one_line() {
    let data = data_dir("config-bad-env");
    let path = ("VIREO_SYSTEM_PATH", data.to_str().unwrap());
    let (status, stderr) = run_to_exit(&[], &[path, ("VIREO_TCP_PORT", "8090")]);
    assert!(!status.success());
    assert_eq!(
        one_line(&stderr),
        "vireo-server: environment variable VIREO_TCP_PORT: unknown key (no configuration key is named so)"
    );
    let (status, stderr) = run_to_exit(&[], &[path, ("VIREO_SYSTEM_SHARDING_CPU_ALLOCATION", "lots")]);
    assert!(!status.success());
    assert!(one_line(&stderr).contains("key `system.sharding.cpu_allocation`"), "{stderr}");
    let (status, stderr) = run_to_exit(&[], &[path, ("VIREO_TCP_FRAME_SIZE_MAX", "-1")]);
    assert!(!status.success());
    assert!(one_line(&stderr).contains("`tcp.frame_size_max`"), "{stderr}");
    let (status, stderr) = run_to_exit(&["--replica-id", "3"], &[path]);
    assert!(!status.success());
    assert!(one_line(&stderr).contains("--replica-id 3"), "{stderr}");
    let (status, _) = run_to_exit(&["--no-such-flag"], &[path]);
    assert!(!status.success());
}

#[test]
fn a_port_in_use_and_a_data_directory_in_use_stop_the_server_with_one_line() {
    let data = data_dir("config-port-in-use");
    let running = Server::start(&data, &[("VIREO_SYSTEM_SHARDING_CPU_ALLOCATION", "1")]);
    let other = data_dir("config-port-in-use-other");
    let address = running.address.to_string();
    let (status, stderr) = run_to_exit(
        &["--with-default-root-credentials"],
        &[
            ("VIREO_SYSTEM_PATH", other.to_str().unwrap()),
            ("VIREO_TCP_ADDRESS", &address),
            ("VIREO_HTTP_ENABLED", "false"),
        ],
    );
    assert!(!status.success());
    assert!(
        one_line(&stderr).starts_with(&format!(
            "vireo-server: key `tcp.address`: cannot listen on {address}: the address is in use"
        )),
        "{stderr}"
    );
    let (status, stderr) = run_to_exit(
        &["--with-default-root-credentials"],
        &[
            ("VIREO_SYSTEM_PATH", data.to_str().unwrap()),
            ("VIREO_TCP_ADDRESS", "127.0.0.1:0"),
            ("VIREO_HTTP_ENABLED", "false"),
        ],
    );
    assert!(!status.success());
    assert!(one_line(&stderr).contains("is in use by another vireo-server"), "{stderr}");
    let written = std::fs::read_to_string(data.join("runtime/current_config.toml")).unwrap();
    assert!(written.contains(&format!("address = \"{address}\"")), "the bound port is written: {written}");
}
