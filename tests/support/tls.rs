//! Certificates of a private certificate authority, made with `openssl` once per test binary,
//! and Redis servers that speak TLS with them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::cluster::Cluster;
use super::sentinel::{SentinelSetup, SetupOptions};
use super::server::{Server, ServerKind, free_port};

/// A certificate authority of the tests' own, a server certificate for `127.0.0.1` and a
/// client certificate it signed, and a second authority that signed nothing of these.
pub struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        let path = self.path(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// The authority's certificate (PEM).
    pub fn ca(&self) -> Vec<u8> {
        self.read("ca.crt")
    }

    /// A client certificate the authority signed, and its key (PEM).
    pub fn client(&self) -> (Vec<u8>, Vec<u8>) {
        (self.read("client.crt"), self.read("client.key"))
    }

    /// Another authority's certificate: it vouches for none of these.
    pub fn stranger_ca(&self) -> Vec<u8> {
        self.read("stranger.crt")
    }
}

/// The certificates, made on first use.
pub fn certificates() -> &'static Certificates {
    static MADE: OnceLock<Certificates> = OnceLock::new();
    MADE.get_or_init(|| {
        let dir = super::server::servers_root().join(format!("tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        make(&dir);
        Certificates { dir }
    })
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("openssl not found ({e}): run scripts/install-test-deps.sh (apt-get install openssl)")
        });
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn make(dir: &Path) {
    for (name, subject) in [
        ("ca", "/CN=leasehold test CA"),
        ("stranger", "/CN=another CA"),
    ] {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "3",
                "-subj",
                subject,
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
    }
    for (name, extensions) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
        ),
        (
            "client",
            "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
        ),
    ] {
        std::fs::write(dir.join(format!("{name}.ext")), extensions).expect("write extensions");
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN=leasehold test {name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-days",
                "3",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.crt"),
            ],
        );
    }
}

/// A Redis server that also listens for TLS on the returned port, with the authority's
/// server certificate; `clients_need_certificates` asks clients for theirs
/// (`tls-auth-clients yes`).
pub fn server(clients_need_certificates: bool) -> (Server, u16) {
    let port = free_port();
    let args = flags(port, clients_need_certificates);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(ServerKind::Redis7, &args);
    (server, port)
}

/// A cluster of 3 masters that also listen for TLS, on the returned ports, and speak it
/// on their bus (each presents the client certificate to the others): a node announces
/// its TLS port to a client over TLS, its plain one to a plain client (the harness's).
/// `clients_need_certificates` as for [`server`].
pub fn cluster(clients_need_certificates: bool) -> (Cluster, Vec<u16>) {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let cluster = Cluster::start_with(ServerKind::Redis7, |i| {
        let mut args = peer_flags(ports[i], clients_need_certificates);
        args.extend(["--tls-cluster".to_owned(), "yes".to_owned()]);
        args
    });
    (cluster, ports)
}

/// A Sentinel setup (master, replica, 3 sentinels) whose processes also listen for TLS,
/// asking clients for certificates, and speak it to each other, presenting the client
/// certificate.
pub fn sentinel() -> SentinelSetup {
    SentinelSetup::start_with(
        ServerKind::Redis7,
        SetupOptions {
            tls: Some(|port| {
                let mut args = peer_flags(port, true);
                args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
                args
            }),
            ..SetupOptions::default()
        },
    )
}

/// [`flags`], and the client certificate that the server presents when it connects to
/// another (a cluster's bus, a replica's link, a sentinel's).
fn peer_flags(port: u16, clients_need_certificates: bool) -> Vec<String> {
    let path = |name: &str| certificates().path(name).display().to_string();
    let mut args = flags(port, clients_need_certificates);
    args.extend([
        "--tls-client-cert-file".to_owned(),
        path("client.crt"),
        "--tls-client-key-file".to_owned(),
        path("client.key"),
    ]);
    args
}

/// The flags of a server that listens for TLS on `port` with the authority's server
/// certificate.
fn flags(port: u16, clients_need_certificates: bool) -> Vec<String> {
    let path = |name: &str| certificates().path(name).display().to_string();
    let auth = if clients_need_certificates {
        "yes"
    } else {
        "no"
    };
    [
        "--tls-port".to_owned(),
        port.to_string(),
        "--tls-cert-file".to_owned(),
        path("server.crt"),
        "--tls-key-file".to_owned(),
        path("server.key"),
        "--tls-ca-cert-file".to_owned(),
        path("ca.crt"),
        "--tls-auth-clients".to_owned(),
        auth.to_owned(),
    ]
    .into()
}
