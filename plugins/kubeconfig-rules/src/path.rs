//! Paths written in a kubeconfig (`certificate-authority`, `client-certificate`,
//! `client-key`, `tokenFile`).

use std::path::{Component, Path, PathBuf};

/// Resolves a path written in the kubeconfig at `kubeconfig` as kubectl does: an absolute
/// path is kept as it is; a relative one is joined to the kubeconfig's directory and cleaned
/// lexically (Go's `filepath.Join`), without resolving symbolic links, so a Secret volume's
/// `..data` indirection stays visible.
///
/// ```
/// use std::path::Path;
/// use vigil_kubeconfig_rules::path::resolve;
///
/// let kubeconfig = Path::new("/home/u/.kube/config");
/// assert_eq!(resolve(kubeconfig, "../.minikube/ca.crt"), Path::new("/home/u/.minikube/ca.crt"));
/// assert_eq!(resolve(kubeconfig, "/etc/pki/ca.crt"), Path::new("/etc/pki/ca.crt"));
/// ```
pub fn resolve(kubeconfig: &Path, written: &str) -> PathBuf {
    let file = Path::new(written);
    if file.is_absolute() {
        return file.to_path_buf();
    }
    let directory = kubeconfig.parent().unwrap_or(Path::new("/"));
    let mut cleaned = PathBuf::new();
    for component in directory.join(file).components() {
        match component {
            Component::CurDir => {}
            // `pop` stops at the root, as Go's Clean does for "/..".
            Component::ParentDir => {
                cleaned.pop();
            }
            other => cleaned.push(other),
        }
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_joined_and_cleaned_like_kubectl() {
        let check = |kubeconfig: &str, written: &str, expected: &str| {
            assert_eq!(
                resolve(Path::new(kubeconfig), written),
                PathBuf::from(expected),
                "{kubeconfig} + {written}"
            );
        };
        check("/home/u/.kube/config", "ca.crt", "/home/u/.kube/ca.crt");
        check(
            "/home/u/.kube/config",
            "./certs/ca.crt",
            "/home/u/.kube/certs/ca.crt",
        );
        check(
            "/home/u/.kube/config",
            "../.minikube/ca.crt",
            "/home/u/.minikube/ca.crt",
        );
        check("/etc/kube/config", "../../../../ca.crt", "/ca.crt");
        check(
            "/secrets/kube/config",
            "..data/ca.crt",
            "/secrets/kube/..data/ca.crt",
        );
        check("/home/u/.kube/config", "/etc/pki/ca.crt", "/etc/pki/ca.crt");
        check(
            "/home/u/.kube/config",
            "/etc/../pki/ca.crt",
            "/etc/../pki/ca.crt",
        );
    }
}
