//! A small ext4 file system on a loop device, made and mounted by a test (which runs as root, as
//! CI does): what a full or failing disk is tried on. Without root, or where the kernel has no
//! loop devices, `LoopMount::new` says why and the test fails: it never passes without trying.
//! Unmounted (lazily, so a process still holding files cannot keep it) and removed when dropped.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct LoopMount {
    image: PathBuf,
    pub path: PathBuf,
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program).args(args).output().map_err(|error| format!("{program}: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()))
    }
}

impl LoopMount {
    /// A fresh file system of `size_mib` MiB mounted under the target directory's tmp as `name`.
    pub fn new(name: &str, size_mib: u64) -> Result<LoopMount, String> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("mounting a loop device needs root (CI runs as root)".to_string());
        }
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let image = base.join(format!("{name}.img"));
        let path = base.join(format!("{name}.mnt"));
        let _ = run("umount", &["-l", path.to_str().unwrap()]);
        let _ = std::fs::remove_file(&image);
        std::fs::create_dir_all(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        let file = std::fs::File::create(&image).map_err(|error| format!("{}: {error}", image.display()))?;
        file.set_len(size_mib << 20).map_err(|error| error.to_string())?;
        drop(file);
        run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()])?;
        let mount = LoopMount { image, path };
        mount.mount()?;
        Ok(mount)
    }

    /// Mounted so that an error makes the kernel turn the file system read-only under its
    /// writers, as it does when the device fails (`fail`).
    fn mount(&self) -> Result<(), String> {
        let (image, path) = (self.image.to_str().unwrap(), self.path.to_str().unwrap());
        run("mount", &["-o", "loop,errors=remount-ro", image, path])
    }

    /// A directory on the mount.
    pub fn dir(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The file system meets an error, as on a failing device: ext4 aborts its journal and turns
    /// read-only under whoever has files open on it, and their next writes and syncs fail with
    /// EROFS (`/sys/fs/ext4/<device>/trigger_fs_error`).
    pub fn fail(&self) -> Result<(), String> {
        let source = Command::new("findmnt")
            .args(["-n", "-o", "SOURCE", self.path.to_str().unwrap()])
            .output()
            .map_err(|error| format!("findmnt: {error}"))?;
        let device = String::from_utf8_lossy(&source.stdout).trim().rsplit('/').next().unwrap_or_default().to_string();
        let trigger = format!("/sys/fs/ext4/{device}/trigger_fs_error");
        std::fs::write(&trigger, "vireo test: a failing disk\n").map_err(|error| format!("{trigger}: {error}"))
    }

    /// A failed file system made whole again, as an operator would (unmount, fsck, mount): the
    /// "good disk" a server restarts on.
    pub fn repair(&self) -> Result<(), String> {
        run("umount", &[self.path.to_str().unwrap()])?;
        let status = Command::new("e2fsck")
            .args(["-f", "-y", self.image.to_str().unwrap()])
            .output()
            .map_err(|error| format!("e2fsck: {error}"))?
            .status;
        // 0: clean, 1: errors fixed; anything else left it unusable.
        if !matches!(status.code(), Some(0 | 1)) {
            return Err(format!("e2fsck: {status}"));
        }
        self.mount()
    }

    /// Bytes free for an unprivileged writer.
    pub fn free_bytes(&self) -> u64 {
        let path = std::ffi::CString::new(self.path.to_str().unwrap()).unwrap();
        // SAFETY: statvfs(2) fills the zeroed struct from a NUL-terminated path.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stat) }, 0);
        stat.f_bavail as u64 * stat.f_frsize as u64
    }

    pub fn image(&self) -> &Path {
        &self.image
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", self.path.to_str().unwrap()]);
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir(&self.path);
    }
}
