//! The root user's credentials at first boot: kept as iggy / iggy only when asked
//! (`--with-default-root-credentials`), taken from VIREO_ROOT_USERNAME / VIREO_ROOT_PASSWORD, or
//! generated and printed once; a restart keeps whatever was set; `--fresh` starts over.

mod server_process;

use std::time::Duration;

use iggy::prelude::*;
use server_process::{data_dir, Server};

async fn login(server: &Server, username: &str, password: &str) -> Result<(), IggyError> {
    let client = IggyClient::builder().with_tcp().with_server_address(server.address.to_string()).build().unwrap();
    client.connect().await?;
    tokio::time::timeout(Duration::from_secs(20), client.login_user(username, password))
        .await
        .expect("a login is answered")
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_credentials_come_from_the_environment_at_first_boot_and_stay() {
    let data = data_dir("root-from-env");
    let env = [("VIREO_ROOT_USERNAME", "admin"), ("VIREO_ROOT_PASSWORD", "s3cret-admin")];
    let mut server = Server::start_with(&data, &env, &[]);
    login(&server, "admin", "s3cret-admin").await.expect("the configured root logs in");
    assert_eq!(login(&server, "iggy", "iggy").await.unwrap_err().as_code(), IggyError::InvalidCredentials.as_code());
    server.kill();
    // Restarted without them: the credentials set at first boot stay, nothing is generated.
    let mut server = Server::start_with(&data, &[], &[]);
    login(&server, "admin", "s3cret-admin").await.expect("still the configured root");
    assert!(!server.output().contains("generated password"), "{}", server.output());
    server.kill();
    // --fresh starts over: with the default credentials this time.
    let server = Server::start_with(&data, &[], &["--fresh", "--with-default-root-credentials"]);
    login(&server, "iggy", "iggy").await.expect("a fresh start has the defaults when asked");
    assert_eq!(
        login(&server, "admin", "s3cret-admin").await.unwrap_err().as_code(),
        IggyError::InvalidCredentials.as_code()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_flag_or_environment_a_random_root_password_is_printed_once() {
    let data = data_dir("root-generated");
    let server = Server::start_with(&data, &[], &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let password = loop {
        let output = server.output();
        if let Some(line) = output.lines().find(|line| line.contains("generated password ")) {
            break line.split("generated password ").nth(1).unwrap().split(' ').next().unwrap().to_string();
        }
        assert!(std::time::Instant::now() < deadline, "no generated password printed: {output}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(password.len() >= 20, "{password}");
    login(&server, "iggy", &password).await.expect("the generated password logs in");
    assert_eq!(login(&server, "iggy", "iggy").await.unwrap_err().as_code(), IggyError::InvalidCredentials.as_code());
    let current = std::fs::read_to_string(data.join("runtime/current_config.toml")).unwrap();
    assert!(!current.contains(&password), "the password is in no file");
    let log = std::fs::read_to_string(data.join("logs/vireo-server.log")).unwrap();
    assert!(!log.contains(&password), "the password is never logged");
    assert_eq!(server.output().matches(&password).count(), 1, "printed once");
}
