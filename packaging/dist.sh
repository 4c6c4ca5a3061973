#!/usr/bin/env bash
# Builds what this repository ships into target/dist/, from the checkout:
#
#   dsh_bash-VERSION-py3-none-PLATFORM.whl   the binary as a wheel (maturin,
#                                            bindings = "bin"): pip, pipx, uv
#   dsh-bash-VERSION.tgz                     the npm package: a launcher whose
#   dsh-bash-linux-ARCH-VERSION.tgz          optional dependency is this
#                                            platform's binary (as Codex ships)
#   dsh-bash.1                               the man page
#   completions/                             bash, zsh, fish, elvish, powershell
#   crates/                                  every crate meant for others, as
#                                            `cargo package` makes it (each
#                                            verified: it builds from its
#                                            .crate alone, with the others')
#   image: localhost/dsh-bash:VERSION        deploy/Containerfile, when podman
#                                            or docker can build here
#
# Needs cargo, python3 with maturin (python3 -m pip install 'maturin>=1.5,<2')
# and npm. Nothing is published from here.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dist=$root/target/dist

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "dist.sh: no workspace version in Cargo.toml" >&2; exit 1; }
case "$(uname -m)" in
  x86_64 | amd64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "dist.sh: no npm platform package for $(uname -m)" >&2; exit 1 ;;
esac
maturin=(maturin)
command -v maturin >/dev/null 2>&1 || maturin=(python3 -m maturin)
"${maturin[@]}" --version >/dev/null 2>&1 || {
  echo "dist.sh: maturin is needed: python3 -m pip install 'maturin>=1.5,<2'" >&2
  exit 1
}
command -v npm >/dev/null 2>&1 || { echo "dist.sh: npm is needed for the npm packages" >&2; exit 1; }

rm -rf "$dist"
mkdir -p "$dist/completions"

# The wheel; the other artifacts take the binary out of it, so that every
# channel ships the same bytes.
(cd packaging/python && "${maturin[@]}" build --release --locked --out "$dist")
wheel=$(ls "$dist"/dsh_bash-*.whl)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
binary=$stage/dsh-bash.bin
python3 - "$wheel" "$binary" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    names = [n for n in wheel.namelist() if n.endswith('.data/scripts/dsh-bash')]
    if len(names) != 1:
        sys.exit('dist.sh: the wheel holds %d dsh-bash binaries' % len(names))
    open(sys.argv[2], 'wb').write(wheel.read(names[0]))
PY
chmod 0755 "$binary"

# npm: the platform package holds the binary; the main package's launcher
# finds it and execs it.
platform="dsh-bash-linux-$arch"
mkdir -p "$stage/$platform/bin" "$stage/dsh-bash/bin"
install -m 0755 "$binary" "$stage/$platform/bin/dsh-bash"
node_cpu=$arch
cat > "$stage/$platform/package.json" <<EOF
{
  "name": "$platform",
  "version": "$version",
  "description": "The dsh-bash binary for Linux $arch (installed by the dsh-bash package).",
  "license": "MIT OR Apache-2.0",
  "os": ["linux"],
  "cpu": ["$node_cpu"],
  "files": ["bin/dsh-bash"]
}
EOF
sed "s/@VERSION@/$version/g" packaging/npm/dsh-bash/package.json.in > "$stage/dsh-bash/package.json"
install -m 0755 packaging/npm/dsh-bash/bin/dsh-bash "$stage/dsh-bash/bin/dsh-bash"
cp packaging/npm/dsh-bash/README.md "$stage/dsh-bash/README.md"
(cd "$dist" && npm pack --silent "$stage/$platform" "$stage/dsh-bash" >/dev/null)

# The man page and completions, from the binary itself.
"$binary" manpage > "$dist/dsh-bash.1"
for shell in bash zsh fish elvish powershell; do
  "$binary" completions "$shell" > "$dist/completions/dsh-bash.$shell"
done

# The crates, as crates.io would take them (the bench and the conformance
# suite stay here): from what git tracks, unless DIST_ALLOW_DIRTY=1.
target_dir=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
# cargo verifies each crate against the others through a registry of its
# own, whose sources it unpacks into CARGO_HOME and builds, keyed by name
# and version only: an earlier run's of the same version would be taken
# for this checkout's. Both are cleared, in a target directory of its own.
packaging=$target_dir/dist-package
rm -rf "$packaging/package" "$packaging"/debug/.fingerprint/dsh-* "$packaging"/debug/deps/libdsh_*
cargo_home=${CARGO_HOME:-$HOME/.cargo}
for crate in "$root"/crates/*/; do
  name=$(basename "$crate")
  rm -rf "$cargo_home"/registry/src/-*/"$name-$version" "$cargo_home"/registry/cache/-*/"$name-$version.crate"
done
dirty=()
[ "${DIST_ALLOW_DIRTY:-0}" = 1 ] && dirty=(--allow-dirty)
cargo package --locked "${dirty[@]}" --target-dir "$packaging" --workspace --exclude dsh-bash-bench --exclude dsh-bash-conformance
mkdir -p "$dist/crates"
mv "$packaging"/package/*.crate "$dist/crates/"

# The container image, where a container tool can build one.
engine=
for tool in podman docker; do
  if command -v "$tool" >/dev/null 2>&1 && "$tool" info >/dev/null 2>&1; then
    engine=$tool
    break
  fi
done
if [ -n "$engine" ]; then
  # Its base images come from a registry: where none is reachable the
  # image is not built, and nothing else is lost.
  if "$engine" build -f deploy/Containerfile -t "localhost/dsh-bash:$version" .; then
    echo "dist.sh: image localhost/dsh-bash:$version built with $engine"
  else
    echo "dist.sh: warning: the image was not built ($engine build failed; see above)" >&2
  fi
else
  echo "dist.sh: no container image: neither podman nor docker can build here"
fi

echo "dist.sh: wrote $dist:"
(cd "$dist" && ls -1 ./*.whl ./*.tgz dsh-bash.1 completions/* crates/*)
