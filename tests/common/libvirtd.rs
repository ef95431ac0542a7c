//! A private libvirtd for tests and benchmarks: only the built-in drivers, the test driver
//! among them, on a socket of its own, so that vgpud and the test share the test driver's
//! `default` host (`test+unix:///default?socket=…`). It runs only as root.

/// A private libvirtd with only the built-in drivers (the test driver among them), on a
/// socket of its own.
pub struct Libvirtd {
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl Libvirtd {
    pub fn start(dir: &std::path::Path) -> Self {
        let sock = dir.join("sock");
        std::fs::create_dir_all(&sock).expect("socket dir");
        std::fs::create_dir_all(dir.join("drivers")).expect("driver dir");
        let conf = dir.join("libvirtd.conf");
        std::fs::write(
            &conf,
            format!(
                "unix_sock_dir = \"{}\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n",
                sock.display()
            ),
        )
        .expect("config");
        let child = std::process::Command::new("libvirtd")
            .arg("-f")
            .arg(&conf)
            .arg("-p")
            .arg(dir.join("pid"))
            .env("LIBVIRT_DRIVER_DIR", dir.join("drivers"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("libvirtd (apt-get install libvirt-daemon)");
        let socket = sock.join("libvirt-sock");
        for _ in 0..200 {
            if socket.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        assert!(socket.exists(), "libvirtd did not open its socket");
        Libvirtd {
            child,
            dir: dir.to_path_buf(),
        }
    }

    pub fn uri(dir: &std::path::Path) -> String {
        format!(
            "test+unix:///default?socket={}",
            dir.join("sock/libvirt-sock").display()
        )
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.dir.join("sock/libvirt-sock"));
    }
}

impl Drop for Libvirtd {
    fn drop(&mut self) {
        self.kill();
    }
}
