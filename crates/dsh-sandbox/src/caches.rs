//! The sandbox's own caches: where package managers and build tools keep
//! what they download and build while confined, instead of the host's
//! caches.
//!
//! A cache is code the host runs later (a wheel pip installs from its
//! cache, a `build.rs` under `~/.cargo/registry/src`, a package npm
//! unpacks from `~/.npm/_cacache`), so a confined command never writes the
//! host's caches, and nothing unconfined is ever pointed at the sandbox's.
//! Each workspace has caches of its own: shared between workspaces, a
//! cache would carry one workspace's poison into another's builds (a
//! rewritten `build.rs` in cargo's extracted sources, a `config.toml`
//! naming a `rustc-wrapper`, a package npx runs, a Gradle init script).
//! [`TOOL_CACHES`] is the table of what each tool gets; [`SandboxCaches`]
//! is that table resolved for one command: the directories (made by the
//! executor that owns them, writable for the command), the host paths each
//! one stands in for (a backend that can mount binds it over them, so a
//! hard-coded path lands in the sandbox's cache too) and the variables
//! that point the tools at them (every backend sets them).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the host keeps a tool's own cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostPlace {
    /// Relative to the home directory.
    Home(&'static str),
    /// Relative to `$XDG_CACHE_HOME` (default `~/.cache`).
    XdgCache(&'static str),
    /// Relative to `$CARGO_HOME` (default `~/.cargo`).
    CargoHome(&'static str),
    /// Relative to the first entry of `$GOPATH` (default `~/go`).
    GoPath(&'static str),
}

/// What a variable of a tool is set to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheValue {
    /// The tool's sandbox cache directory, or a path beneath it (`""` is
    /// the directory itself).
    Dir(&'static str),
    /// A fixed value (`GOTOOLCHAIN=local`: no toolchain downloads).
    Fixed(&'static str),
    /// A Java system property naming the directory, put before the
    /// variable's inherited value (`MAVEN_OPTS`).
    JavaProperty(&'static str),
}

/// One tool's entry: its sandbox cache directory, the host caches it
/// stands for and the variables that point the tool at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolCache {
    /// The tool, as the README's table and the results name it.
    pub tool: &'static str,
    /// The directory's name under the workspace's root.
    pub dir: &'static str,
    /// The host's own caches of the tool, each with the path beneath the
    /// sandbox directory that stands in for it.
    pub host: &'static [(HostPlace, &'static str)],
    /// The variables set for every confined command.
    pub vars: &'static [(&'static str, CacheValue)],
}

/// Every tool whose cache the sandbox keeps.
pub const TOOL_CACHES: &[ToolCache] = &[
    ToolCache {
        tool: "npm",
        dir: "npm",
        host: &[(HostPlace::Home(".npm"), "")],
        vars: &[("npm_config_cache", CacheValue::Dir(""))],
    },
    ToolCache {
        tool: "yarn",
        dir: "yarn",
        host: &[
            (HostPlace::XdgCache("yarn"), "v1"),
            (HostPlace::Home(".yarn/berry"), "berry"),
        ],
        vars: &[
            ("YARN_CACHE_FOLDER", CacheValue::Dir("v1")),
            ("YARN_GLOBAL_FOLDER", CacheValue::Dir("berry")),
        ],
    },
    ToolCache {
        tool: "pnpm",
        dir: "pnpm",
        host: &[(HostPlace::Home(".local/share/pnpm/store"), "store")],
        vars: &[("pnpm_config_store_dir", CacheValue::Dir("store"))],
    },
    ToolCache {
        tool: "pip",
        dir: "pip",
        host: &[(HostPlace::XdgCache("pip"), "")],
        vars: &[("PIP_CACHE_DIR", CacheValue::Dir(""))],
    },
    ToolCache {
        tool: "uv",
        dir: "uv",
        host: &[(HostPlace::XdgCache("uv"), "")],
        vars: &[("UV_CACHE_DIR", CacheValue::Dir(""))],
    },
    ToolCache {
        tool: "cargo",
        dir: "cargo",
        host: &[
            (HostPlace::CargoHome("registry"), "registry"),
            (HostPlace::CargoHome("git"), "git"),
        ],
        vars: &[("CARGO_HOME", CacheValue::Dir(""))],
    },
    ToolCache {
        tool: "go modules",
        dir: "go-mod",
        host: &[(HostPlace::GoPath("pkg/mod"), "")],
        vars: &[
            ("GOMODCACHE", CacheValue::Dir("")),
            ("GOTOOLCHAIN", CacheValue::Fixed("local")),
        ],
    },
    ToolCache {
        tool: "go build",
        dir: "go-build",
        host: &[(HostPlace::XdgCache("go-build"), "")],
        vars: &[("GOCACHE", CacheValue::Dir(""))],
    },
    ToolCache {
        tool: "gradle",
        dir: "gradle",
        host: &[(HostPlace::Home(".gradle/caches"), "caches")],
        vars: &[("GRADLE_USER_HOME", CacheValue::Dir(""))],
    },
    ToolCache {
        tool: "maven",
        dir: "maven",
        host: &[(HostPlace::Home(".m2/repository"), "")],
        vars: &[(
            "MAVEN_OPTS",
            CacheValue::JavaProperty("-Dmaven.repo.local="),
        )],
    },
    ToolCache {
        tool: "XDG cache",
        dir: "xdg",
        host: &[],
        vars: &[("XDG_CACHE_HOME", CacheValue::Dir(""))],
    },
];

/// The host's own places, read from the server's environment once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostDirs {
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// `$XDG_CACHE_HOME`, else `~/.cache`.
    pub xdg_cache: Option<PathBuf>,
    /// `$CARGO_HOME`, else `~/.cargo`.
    pub cargo_home: Option<PathBuf>,
    /// The first entry of `$GOPATH`, else `~/go`.
    pub go_path: Option<PathBuf>,
    /// `$MAVEN_OPTS` as the server has it (the property goes before it).
    pub maven_opts: Option<OsString>,
}

impl HostDirs {
    /// The host's places as `var` (an environment lookup) says.
    pub fn from_env(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let absolute = |name: &str| {
            var(name)
                .map(PathBuf::from)
                .filter(|path| path.is_absolute())
        };
        let home = absolute("HOME");
        let below_home = |rest: &str| home.as_ref().map(|home| home.join(rest));
        let go_path = var("GOPATH")
            .and_then(|paths| std::env::split_paths(&paths).next())
            .filter(|path| path.is_absolute());
        HostDirs {
            xdg_cache: absolute("XDG_CACHE_HOME").or_else(|| below_home(".cache")),
            cargo_home: absolute("CARGO_HOME").or_else(|| below_home(".cargo")),
            go_path: go_path.or_else(|| below_home("go")),
            maven_opts: var("MAVEN_OPTS"),
            home,
        }
    }

    /// `place` on this host, if its base is known.
    pub fn path_of(&self, place: HostPlace) -> Option<PathBuf> {
        let (base, rest) = match place {
            HostPlace::Home(rest) => (&self.home, rest),
            HostPlace::XdgCache(rest) => (&self.xdg_cache, rest),
            HostPlace::CargoHome(rest) => (&self.cargo_home, rest),
            HostPlace::GoPath(rest) => (&self.go_path, rest),
        };
        base.as_ref().map(|base| base.join(rest))
    }
}

/// One tool's sandbox cache directory for a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheDir {
    /// The tool ([`ToolCache::tool`]).
    pub tool: &'static str,
    /// The directory on the host (made by the executor, writable for the
    /// command).
    pub path: PathBuf,
    /// The host's own caches it stands for (absolute), each with the
    /// directory that stands in for it (beneath [`CacheDir::path`]).
    pub replaces: Vec<(PathBuf, PathBuf)>,
}

/// The sandbox caches of one command: every [`TOOL_CACHES`] entry
/// resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxCaches {
    /// The directories, one per tool.
    pub dirs: Vec<CacheDir>,
    /// The root holding them (the workspace's): what a backend makes
    /// writable, one bind or rule, whatever the number of tools.
    pub roots: Vec<PathBuf>,
    /// Whether they last only as long as the command (the persistent
    /// root could not be used; see the executor's log for why).
    pub ephemeral: bool,
    /// `$MAVEN_OPTS` as the server has it (the repository's property goes
    /// before it).
    pub maven_opts: Option<OsString>,
}

impl SandboxCaches {
    /// The caches under `root` (the workspace's) standing for the host's
    /// caches in `host`.
    pub fn plan(root: &Path, host: &HostDirs) -> Self {
        let dirs = TOOL_CACHES
            .iter()
            .map(|entry| {
                let path = root.join(entry.dir);
                let replaces = entry
                    .host
                    .iter()
                    .filter_map(|(place, sub)| {
                        host.path_of(*place)
                            .map(|host| (host, sub_path(&path, sub)))
                    })
                    .collect();
                CacheDir {
                    tool: entry.tool,
                    path,
                    replaces,
                }
            })
            .collect();
        SandboxCaches {
            dirs,
            roots: vec![root.to_path_buf()],
            ephemeral: false,
            maven_opts: host.maven_opts.clone(),
        }
    }

    /// Every directory to make before a command uses them: each tool's,
    /// and the ones beneath it that stand in for a host cache.
    pub fn directories(&self) -> impl Iterator<Item = &Path> {
        self.roots
            .iter()
            .map(PathBuf::as_path)
            .chain(self.dirs.iter().flat_map(|dir| {
                std::iter::once(dir.path.as_path())
                    .chain(dir.replaces.iter().map(|(_, s)| s.as_path()))
            }))
    }

    /// The variables pointing the tools at their caches, as the command
    /// sees the directories (`inside` maps a host path to the command's
    /// view of it: the identity but where a backend mounts it elsewhere).
    pub fn environment(
        &self,
        inside: impl Fn(&Path) -> PathBuf,
    ) -> Vec<(OsString, Option<OsString>)> {
        let mut environment = Vec::new();
        for (entry, dir) in TOOL_CACHES.iter().zip(&self.dirs) {
            for (name, value) in entry.vars {
                let value: OsString = match value {
                    CacheValue::Dir(sub) => inside(&sub_path(&dir.path, sub)).into(),
                    CacheValue::Fixed(text) => text.into(),
                    CacheValue::JavaProperty(property) => {
                        let mut opts = OsString::from(*property);
                        opts.push(inside(&dir.path));
                        if let Some(inherited) = self.maven_opts.as_ref().filter(|v| !v.is_empty())
                        {
                            opts.push(" ");
                            opts.push(inherited);
                        }
                        opts
                    }
                };
                environment.push((OsString::from(*name), Some(value)));
            }
        }
        environment
    }

    /// The tool whose host cache `path` lies in, and the sandbox directory
    /// that stands for it there.
    pub fn host_cache_of(&self, path: &Path) -> Option<(&'static str, &Path, &Path)> {
        self.dirs
            .iter()
            .flat_map(|dir| {
                dir.replaces
                    .iter()
                    .map(move |(host, stand_in)| (dir.tool, host.as_path(), stand_in.as_path()))
            })
            .filter(|(_, host, _)| path.starts_with(host))
            .max_by_key(|(_, host, _)| host.components().count())
    }

    /// True if and only if `path` lies in one of the sandbox's caches'
    /// roots (writable for the command).
    pub fn holds(&self, path: &Path) -> bool {
        self.roots.iter().any(|root| path.starts_with(root))
    }
}

fn sub_path(dir: &Path, sub: &str) -> PathBuf {
    if sub.is_empty() {
        dir.to_path_buf()
    } else {
        dir.join(sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostDirs {
        HostDirs::from_env(|name| match name {
            "HOME" => Some("/home/u".into()),
            "CARGO_HOME" => Some("/opt/cargo".into()),
            "GOPATH" => Some("/src/go:/other".into()),
            "MAVEN_OPTS" => Some("-Xmx1g".into()),
            "XDG_CACHE_HOME" => Some("relative/ignored".into()),
            _ => None,
        })
    }

    #[test]
    fn every_tool_points_at_its_own_directory_and_stands_for_the_host_cache() {
        let host = host();
        assert_eq!(host.xdg_cache, Some(PathBuf::from("/home/u/.cache")));
        let caches = SandboxCaches::plan(Path::new("/c/ws/1"), &host);
        let env: std::collections::BTreeMap<_, _> = caches
            .environment(Path::to_path_buf)
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.unwrap().into_string().unwrap()))
            .collect();
        assert_eq!(env["npm_config_cache"], "/c/ws/1/npm");
        assert_eq!(env["PIP_CACHE_DIR"], "/c/ws/1/pip");
        assert_eq!(env["CARGO_HOME"], "/c/ws/1/cargo");
        assert_eq!(env["GOCACHE"], "/c/ws/1/go-build");
        assert_eq!(env["XDG_CACHE_HOME"], "/c/ws/1/xdg");
        assert_eq!(env["GOTOOLCHAIN"], "local");
        assert_eq!(env["MAVEN_OPTS"], "-Dmaven.repo.local=/c/ws/1/maven -Xmx1g");
        let (tool, host_dir, stand_in) = caches
            .host_cache_of(Path::new("/opt/cargo/registry/cache/x.crate"))
            .unwrap();
        assert_eq!(
            (tool, host_dir, stand_in),
            (
                "cargo",
                Path::new("/opt/cargo/registry"),
                Path::new("/c/ws/1/cargo/registry")
            )
        );
        assert_eq!(
            caches
                .host_cache_of(Path::new("/src/go/pkg/mod/x"))
                .unwrap()
                .0,
            "go modules"
        );
        assert_eq!(
            caches
                .host_cache_of(Path::new("/home/u/.npm/_logs/1.log"))
                .unwrap()
                .0,
            "npm"
        );
        assert!(caches
            .host_cache_of(Path::new("/home/u/.cargo/registry"))
            .is_none());
        assert!(caches.holds(Path::new("/c/ws/1/npm/_cacache")));
        assert!(!caches.holds(Path::new("/c/ws/2")));
        assert_eq!(caches.roots, [PathBuf::from("/c/ws/1")]);
        // Made: every tool's directory and each stand-in beneath it.
        let made: Vec<_> = caches.directories().collect();
        assert!(made.contains(&Path::new("/c/ws/1/cargo/registry")));
        assert!(made.contains(&Path::new("/c/ws/1/yarn/berry")));
    }

    #[test]
    fn a_view_of_its_own_is_what_the_variables_say() {
        let host = HostDirs::from_env(|_| None);
        assert_eq!(host, HostDirs::default());
        let caches = SandboxCaches::plan(Path::new("/priv/c"), &host);
        assert!(caches.dirs.iter().all(|d| d.replaces.is_empty()));
        let env = caches.environment(|p| Path::new("/tmp").join(p.strip_prefix("/priv").unwrap()));
        assert!(env.contains(&("PIP_CACHE_DIR".into(), Some("/tmp/c/pip".into()))));
        assert!(env.contains(&(
            "MAVEN_OPTS".into(),
            Some("-Dmaven.repo.local=/tmp/c/maven".into())
        )));
    }
}
