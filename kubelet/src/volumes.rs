//! Pod volumes under `<root-dir>/pods/<uid>/volumes/<plugin>/<name>`: emptyDir (disk, or
//! tmpfs with `medium: Memory`), hostPath with its type checks, and the API-object volumes
//! (configMap, secret, downwardAPI, projected with service account tokens) written the way
//! upstream's atomic writer does: files in a timestamped directory, a `..data` symlink
//! switched atomically, and one symlink per top-level entry, so updates are seen whole.
//! Secret, downwardAPI and projected volumes live on tmpfs, never on disk.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Pod, Volume};

use crate::envs::{self, NodeFacts, PodObjects};

/// Where the kubelet keeps pods' directories.
pub fn pod_dir(root: &Path, uid: &str) -> PathBuf {
    root.join("pods").join(uid)
}

fn plugin_dir(v: &Volume) -> &'static str {
    if v.empty_dir.is_some() {
        "kubernetes.io~empty-dir"
    } else if v.config_map.is_some() {
        "kubernetes.io~configmap"
    } else if v.secret.is_some() {
        "kubernetes.io~secret"
    } else if v.downward_api.is_some() {
        "kubernetes.io~downward-api"
    } else {
        "kubernetes.io~projected"
    }
}

/// A token the kubelet fetched for a projected volume, and when to fetch the next.
#[derive(Debug, Clone)]
pub struct CachedToken {
    pub token: String,
    pub refresh_at: SystemTime,
}

/// What building the files of a volume needs from outside: objects already fetched, and
/// tokens (requested by the caller through the TokenRequest API).
pub struct Sources<'a> {
    pub objects: &'a PodObjects,
    /// Tokens by (volume name, source index).
    pub tokens: &'a HashMap<(String, usize), CachedToken>,
    pub pod_ips: &'a [String],
    pub node: &'a NodeFacts,
}

/// Prepares every volume of `pod`; returns each volume's host path. An error names the
/// volume and is reported as the pod's FailedMount event.
pub fn setup(root: &Path, pod: &Pod, src: &Sources<'_>) -> Result<HashMap<String, PathBuf>, String> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut paths = HashMap::new();
    for v in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        let path = setup_one(root, &uid, pod, v, src)
            .map_err(|e| format!("MountVolume.SetUp failed for volume \"{}\" : {e}", v.name))?;
        paths.insert(v.name.clone(), path);
    }
    Ok(paths)
}

fn setup_one(root: &Path, uid: &str, pod: &Pod, v: &Volume, src: &Sources<'_>) -> Result<PathBuf, String> {
    if let Some(hp) = &v.host_path {
        check_host_path(Path::new(&hp.path), hp.type_.as_deref().unwrap_or(""))?;
        return Ok(PathBuf::from(&hp.path));
    }
    if v.persistent_volume_claim.is_some() || v.ephemeral.is_some() {
        return claim_path(pod, v, src);
    }
    let dir = pod_dir(root, uid).join("volumes").join(plugin_dir(v)).join(&v.name);
    if let Some(ed) = &v.empty_dir {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if ed.medium.as_deref() == Some("Memory") {
            let size = ed.size_limit.as_ref().and_then(|q| component_base::quantity::parse_value(&q.0));
            ensure_tmpfs(&dir, size)?;
        }
        // World-writable, as upstream's emptyDir: any container user may use it. With a
        // fsGroup, owned by that group and setgid, so that what containers create there
        // belongs to it too (upstream's SetVolumeOwnership).
        let mode = if let Some(gid) = fs_group(pod) {
            std::os::unix::fs::chown(&dir, None, Some(gid)).map_err(|e| e.to_string())?;
            0o2777
        } else {
            0o777
        };
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())?;
        return Ok(dir);
    }
    let files: BTreeMap<String, (Vec<u8>, u32)>;
    if let Some(cm) = &v.config_map {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mode = cm.default_mode.unwrap_or(0o644) as u32;
        files = match src.objects.configmaps.get(&cm.name) {
            Some(Some(obj)) => {
                let mut data: BTreeMap<String, Vec<u8>> = obj
                    .data
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                for (k, b) in obj.binary_data.clone().unwrap_or_default() {
                    data.insert(k, b.0);
                }
                project_keys(&data, cm.items.as_deref(), mode, cm.optional == Some(true))?
            }
            _ if cm.optional == Some(true) => BTreeMap::new(),
            _ => return Err(format!("configmap \"{}\" not found", cm.name)),
        };
    } else if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        ensure_tmpfs(&dir, None)?;
        let mode = s.default_mode.unwrap_or(0o644) as u32;
        files = match src.objects.secrets.get(&name) {
            Some(Some(obj)) => {
                let data = obj.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
                project_keys(&data, s.items.as_deref(), mode, s.optional == Some(true))?
            }
            _ if s.optional == Some(true) => BTreeMap::new(),
            _ => return Err(format!("secret \"{name}\" not found")),
        };
    } else if let Some(d) = &v.downward_api {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        ensure_tmpfs(&dir, None)?;
        let mode = d.default_mode.unwrap_or(0o644) as u32;
        files = downward_files(pod, d.items.as_deref().unwrap_or_default(), mode, src)?;
    } else if let Some(p) = &v.projected {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        ensure_tmpfs(&dir, None)?;
        let mode = p.default_mode.unwrap_or(0o644) as u32;
        let mut all = BTreeMap::new();
        for (i, s) in p.sources.iter().flatten().enumerate() {
            if let Some(cm) = &s.config_map {
                match src.objects.configmaps.get(&cm.name) {
                    Some(Some(obj)) => {
                        let data = obj
                            .data
                            .clone()
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.into_bytes()))
                            .collect();
                        all.extend(project_keys(
                            &data,
                            cm.items.as_deref(),
                            mode,
                            cm.optional == Some(true),
                        )?);
                    }
                    _ if cm.optional == Some(true) => {}
                    _ => return Err(format!("configmap \"{}\" not found", cm.name)),
                }
            }
            if let Some(s) = &s.secret {
                match src.objects.secrets.get(&s.name) {
                    Some(Some(obj)) => {
                        let data =
                            obj.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
                        all.extend(project_keys(&data, s.items.as_deref(), mode, s.optional == Some(true))?);
                    }
                    _ if s.optional == Some(true) => {}
                    _ => return Err(format!("secret \"{}\" not found", s.name)),
                }
            }
            if let Some(d) = &s.downward_api {
                all.extend(downward_files(pod, d.items.as_deref().unwrap_or_default(), mode, src)?);
            }
            if let Some(t) = &s.service_account_token {
                let token = src
                    .tokens
                    .get(&(v.name.clone(), i))
                    .ok_or_else(|| "service account token not yet requested".to_string())?;
                // Upstream writes the token 0600 unless a fsGroup/runAsUser needs otherwise.
                let token_mode = p.default_mode.map(|m| m as u32).unwrap_or(0o600);
                all.insert(t.path.clone(), (token.token.clone().into_bytes(), token_mode));
            }
        }
        files = all;
    } else {
        return Err("unsupported volume type (supported: emptyDir, hostPath, configMap, secret, downwardAPI, projected, persistentVolumeClaim, ephemeral)".into());
    }
    let mut files = files;
    let group = fs_group(pod);
    if group.is_some() {
        // Upstream's SetVolumeOwnership for read-only volumes: the group may read.
        for (_, mode) in files.values_mut() {
            *mode |= 0o440;
        }
    }
    write_atomic(&dir, &files)?;
    if let Some(gid) = group {
        own_by_group(&dir, gid).map_err(|e| format!("applying fsGroup {gid}: {e}"))?;
    }
    Ok(dir)
}

/// The pod's `securityContext.fsGroup`, if any (a gid outside u32 is ignored).
fn fs_group(pod: &Pod) -> Option<u32> {
    let g = pod.spec.as_ref()?.security_context.as_ref()?.fs_group?;
    u32::try_from(g).ok()
}

/// Gives everything under `dir` (the volume directory itself included, symlinks not
/// followed) to group `gid`; directories become setgid and group-searchable, as upstream's
/// SetVolumeOwnership does. File modes were already widened by the caller.
fn own_by_group(dir: &Path, gid: u32) -> std::io::Result<()> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        std::os::unix::fs::lchown(&d, None, Some(gid))?;
        let mode = std::fs::metadata(&d)?.permissions().mode();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode((mode & 0o7777) | 0o2550))?;
        for e in std::fs::read_dir(&d)?.flatten() {
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else {
                std::os::unix::fs::lchown(e.path(), None, Some(gid))?;
            }
        }
    }
    Ok(())
}

fn project_keys(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: u32,
    optional: bool,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let mut out = BTreeMap::new();
    match items {
        None => {
            for (k, v) in data {
                out.insert(k.clone(), (v.clone(), mode));
            }
        }
        Some(items) => {
            for it in items {
                match data.get(&it.key) {
                    Some(v) => {
                        out.insert(it.path.clone(), (v.clone(), it.mode.map(|m| m as u32).unwrap_or(mode)));
                    }
                    None if optional => {}
                    None => return Err(format!("configured to use key {} but it does not exist", it.key)),
                }
            }
        }
    }
    Ok(out)
}

fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    mode: u32,
    src: &Sources<'_>,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let mut out = BTreeMap::new();
    for it in items {
        let value = if let Some(f) = &it.field_ref {
            envs::field_ref(pod, &f.field_path, src.pod_ips, &src.node.host_ip)?
        } else if let Some(r) = &it.resource_field_ref {
            let container = r.container_name.clone().unwrap_or_default();
            envs::resource_field_ref(
                pod,
                &container,
                &r.resource,
                r.divisor.as_ref().map(|d| d.0.as_str()),
                src.node,
            )?
        } else {
            String::new()
        };
        out.insert(it.path.clone(), (value.into_bytes(), it.mode.map(|m| m as u32).unwrap_or(mode)));
    }
    Ok(out)
}

/// Writes `files` under `dir` as upstream's AtomicWriter: into a new `..<timestamp>`
/// directory, then `..data` is swapped to it with a rename, then top-level symlinks point
/// through `..data`. Nothing changes when the content is the same.
pub fn write_atomic(dir: &Path, files: &BTreeMap<String, (Vec<u8>, u32)>) -> Result<(), String> {
    let data_link = dir.join("..data");
    if let Ok(current) = std::fs::read_link(&data_link) {
        let cur = dir.join(current);
        if same_content(&cur, files) {
            return Ok(());
        }
    }
    for path in files.keys() {
        if path.starts_with('/')
            || path.split('/').any(|c| c == ".." || c.is_empty())
            || path.starts_with("..")
        {
            return Err(format!("invalid file path {path:?}"));
        }
    }
    let stamp = format!(
        "..{}",
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_nanos()
    );
    let ts_dir = dir.join(&stamp);
    let io = |e: std::io::Error| e.to_string();
    std::fs::create_dir_all(&ts_dir).map_err(io)?;
    for (path, (content, mode)) in files {
        let f = ts_dir.join(path);
        if let Some(parent) = f.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&f, content).map_err(io)?;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(*mode & 0o777)).map_err(io)?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(&stamp, &tmp).map_err(io)?;
    let old = std::fs::read_link(&data_link).ok();
    std::fs::rename(&tmp, &data_link).map_err(io)?;
    // Top-level entries: add links for new ones, drop links for ones that went away.
    let tops: std::collections::BTreeSet<String> =
        files.keys().map(|p| p.split('/').next().unwrap_or(p).to_string()).collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(top), &link).map_err(io)?;
        }
    }
    for entry in std::fs::read_dir(dir).map_err(io)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !tops.contains(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

fn same_content(dir: &Path, files: &BTreeMap<String, (Vec<u8>, u32)>) -> bool {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { return false };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                count += 1;
            }
        }
    }
    count == files.len()
        && files.iter().all(|(path, (content, mode))| {
            let f = dir.join(path);
            std::fs::read(&f).ok().as_deref() == Some(content.as_slice())
                && std::fs::metadata(&f)
                    .map(|m| m.permissions().mode() & 0o777 == mode & 0o777)
                    .unwrap_or(false)
        })
}

fn is_mount_point(dir: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return false };
    let d = dir.display().to_string();
    mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(d.as_str()))
}

fn ensure_tmpfs(dir: &Path, size: Option<i64>) -> Result<(), String> {
    if is_mount_point(dir) {
        return Ok(());
    }
    let target = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    let data = CString::new(match size {
        Some(s) if s > 0 => format!("size={s}"),
        _ => String::new(),
    })
    .map_err(|e| e.to_string())?;
    let fstype = c"tmpfs";
    // SAFETY: all pointers are valid NUL-terminated strings for the duration of the call.
    let rc =
        unsafe { libc::mount(fstype.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, data.as_ptr().cast()) };
    if rc != 0 {
        return Err(format!("mounting tmpfs on {}: {}", dir.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Unmounts every mount below `dir` (deepest first) and removes the directory.
pub fn teardown_pod_dir(dir: &Path) -> Result<(), String> {
    let prefix = dir.display().to_string();
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(String::from))
        .filter(|m| m == &prefix || m.starts_with(&format!("{prefix}/")))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let target = CString::new(m.clone()).map_err(|e| e.to_string())?;
        // SAFETY: a valid NUL-terminated path.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(format!("unmounting {m}: {}", std::io::Error::last_os_error()));
        }
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {}: {e}", dir.display())),
    }
}

/// The claims a pod's volumes use: `persistentVolumeClaim` ones by name, generic
/// ephemeral ones as `<pod>-<volume>` (the claim the ephemeral volume controller makes).
pub fn claim_names(pod_name: &str, spec: &k8s_openapi::api::core::v1::PodSpec) -> Vec<String> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => Some(c.claim_name.clone()),
            (None, Some(_)) => Some(format!("{pod_name}-{}", v.name)),
            _ => None,
        })
        .collect()
}

/// Whether the pod mounts volume `name` from a claim it asked to use read-only.
pub fn claim_read_only(pod: &Pod, name: &str) -> bool {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().any(|v| {
        v.name == name && v.persistent_volume_claim.as_ref().and_then(|c| c.read_only).unwrap_or(false)
    })
}

/// The host directory of a claim's bound volume. Only node-local volume types can be
/// mounted here: `hostPath` (with its type check) and `local` (which must exist).
fn claim_path(pod: &Pod, v: &Volume, src: &Sources<'_>) -> Result<PathBuf, String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let name = match &v.persistent_volume_claim {
        Some(c) => c.claim_name.clone(),
        None => format!("{pod_name}-{}", v.name),
    };
    let Some(Some((claim, pv))) = src.objects.claims.get(&name) else {
        return Err(format!("persistentvolumeclaim \"{name}\" not found"));
    };
    if v.ephemeral.is_some() {
        let owner = claim.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true));
        if owner.is_none_or(|r| Some(r.uid.as_str()) != pod.metadata.uid.as_deref()) {
            return Err(format!("PVC {name} was not created for pod {pod_name} (pod is not owner)"));
        }
    }
    let Some(pv) = pv else {
        return Err(format!("persistentvolumeclaim \"{name}\" is not bound"));
    };
    let pv_name = pv.metadata.name.as_deref().unwrap_or_default();
    let spec = pv.spec.as_ref();
    if let Some(hp) = spec.and_then(|s| s.host_path.as_ref()) {
        check_host_path(Path::new(&hp.path), hp.type_.as_deref().unwrap_or(""))?;
        return Ok(PathBuf::from(&hp.path));
    }
    if let Some(local) = spec.and_then(|s| s.local.as_ref()) {
        let path = PathBuf::from(&local.path);
        if !path.exists() {
            return Err(format!("local volume {pv_name}: path {:?} does not exist", local.path));
        }
        return Ok(path);
    }
    Err(format!("persistentvolume {pv_name:?}: unsupported volume type (supported: hostPath, local)"))
}

fn check_host_path(path: &Path, kind: &str) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path);
    let want = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("hostPath type check failed: {} is not a {what}", path.display()))
        }
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if meta.is_err() {
                std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| e.to_string())?;
                return Ok(());
            }
            want(meta.map(|m| m.is_dir()).unwrap_or(false), "directory")
        }
        "FileOrCreate" => {
            if meta.is_err() {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                }
                std::fs::write(path, b"").map_err(|e| e.to_string())?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
                    .map_err(|e| e.to_string())?;
                return Ok(());
            }
            want(meta.map(|m| m.is_file()).unwrap_or(false), "file")
        }
        "Directory" => want(meta.map(|m| m.is_dir()).unwrap_or(false), "directory"),
        "File" => want(meta.map(|m| m.is_file()).unwrap_or(false), "file"),
        "Socket" => want(meta.map(|m| m.file_type().is_socket()).unwrap_or(false), "socket"),
        "CharDevice" => {
            want(meta.map(|m| m.file_type().is_char_device()).unwrap_or(false), "character device")
        }
        "BlockDevice" => want(meta.map(|m| m.file_type().is_block_device()).unwrap_or(false), "block device"),
        other => Err(format!("unknown hostPath type {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fsGroup owns every file and directory of a volume, directories setgid (the
    /// conformance specs "as non-root with defaultMode and fsGroup set" read 0440 files
    /// as a user whose only way in is that group). Needs root, as the kubelet does.
    #[test]
    fn fs_group_owns_the_volume() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let files = BTreeMap::from([
            ("a".to_string(), (b"1".to_vec(), 0o440)),
            ("d/b".to_string(), (b"2".to_vec(), 0o400 | 0o440)),
        ]);
        write_atomic(dir, &files).unwrap();
        own_by_group(dir, 4321).expect("chown (the kubelet's unit tests run as root)");
        for f in ["a", "d/b"] {
            let m = std::fs::metadata(dir.join(f)).unwrap();
            assert_eq!((m.gid(), m.mode() & 0o777), (4321, 0o440), "{f}");
        }
        for d in [dir.to_path_buf(), dir.join("..data/d")] {
            let m = std::fs::metadata(&d).unwrap();
            assert_eq!(m.gid(), 4321, "{}", d.display());
            assert_eq!(m.mode() & 0o2550, 0o2550, "setgid and group-searchable: {}", d.display());
        }
    }

    #[test]
    fn atomic_writer_swaps_data_and_links() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut files = BTreeMap::new();
        files.insert("a".to_string(), (b"1".to_vec(), 0o644));
        files.insert("sub/b".to_string(), (b"2".to_vec(), 0o600));
        write_atomic(dir, &files).unwrap();
        assert_eq!(std::fs::read(dir.join("a")).unwrap(), b"1");
        assert_eq!(std::fs::read(dir.join("sub/b")).unwrap(), b"2");
        let first = std::fs::read_link(dir.join("..data")).unwrap();
        write_atomic(dir, &files).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("..data")).unwrap(),
            first,
            "unchanged content keeps the directory"
        );
        files.remove("sub/b");
        files.insert("a".to_string(), (b"3".to_vec(), 0o644));
        write_atomic(dir, &files).unwrap();
        assert_eq!(std::fs::read(dir.join("a")).unwrap(), b"3");
        assert!(std::fs::symlink_metadata(dir.join("sub")).is_err(), "removed keys disappear");
        assert!(!dir.join(first).exists(), "the old generation is removed");
        assert!(write_atomic(dir, &BTreeMap::from([("../x".to_string(), (vec![], 0o644))])).is_err());
    }

    #[test]
    fn host_path_types() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("made");
        check_host_path(&d, "DirectoryOrCreate").unwrap();
        assert!(d.is_dir());
        check_host_path(&d, "Directory").unwrap();
        assert!(check_host_path(&d, "File").is_err());
        let f = tmp.path().join("f");
        check_host_path(&f, "FileOrCreate").unwrap();
        check_host_path(&f, "File").unwrap();
        assert!(check_host_path(&tmp.path().join("none"), "Directory").is_err());
    }

    #[test]
    fn claims_mount_their_bound_local_volumes() {
        use serde_json::json;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "missing", "persistentVolumeClaim": {"claimName": "nope"}}]},
        }))
        .unwrap();
        assert_eq!(claim_names("p", pod.spec.as_ref().unwrap()), vec!["data", "p-scratch", "nope"]);
        assert!(claim_read_only(&pod, "data") && !claim_read_only(&pod, "scratch"));
        let claim = |owner: &str| -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "c", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": true}]},
                "spec": {"volumeName": "pv"}}))
            .unwrap()
        };
        let host_pv: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv"},
            "spec": {"hostPath": {"path": dir.display().to_string(), "type": "DirectoryOrCreate"}}}))
        .unwrap();
        let local_pv: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv"}, "spec": {"local": {"path": tmp.path().join("absent").display().to_string()}}}))
        .unwrap();
        let mut objects = PodObjects::default();
        objects.claims.insert("data".into(), Some((claim("x"), Some(host_pv.clone()))));
        objects.claims.insert("p-scratch".into(), Some((claim("someone-else"), Some(host_pv))));
        objects.claims.insert("nope".into(), None);
        let (tokens, node) = (HashMap::new(), NodeFacts::default());
        let src = Sources { objects: &objects, tokens: &tokens, pod_ips: &[], node: &node };
        let vols = pod.spec.as_ref().unwrap().volumes.clone().unwrap();
        assert_eq!(claim_path(&pod, &vols[0], &src).unwrap(), dir);
        assert!(dir.is_dir(), "DirectoryOrCreate made the directory");
        assert!(claim_path(&pod, &vols[1], &src).unwrap_err().contains("pod is not owner"));
        assert!(claim_path(&pod, &vols[2], &src).unwrap_err().contains("not found"));
        objects.claims.insert("data".into(), Some((claim("x"), None)));
        let src = Sources { objects: &objects, tokens: &tokens, pod_ips: &[], node: &node };
        assert!(claim_path(&pod, &vols[0], &src).unwrap_err().contains("is not bound"));
        objects.claims.insert("data".into(), Some((claim("x"), Some(local_pv))));
        let src = Sources { objects: &objects, tokens: &tokens, pod_ips: &[], node: &node };
        assert!(claim_path(&pod, &vols[0], &src).unwrap_err().contains("does not exist"));
    }
}
