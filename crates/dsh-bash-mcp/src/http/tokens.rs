//! The bearer tokens: read from a file or the environment, or generated
//! into a private file; compared in constant time.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::{HttpOptions, TOKEN_ENV};
use crate::ServeError;

/// The shortest token accepted from a file or the environment.
const MIN_TOKEN_LEN: usize = 16;

/// A bearer token, compared in constant time.
pub(super) struct Token(pub(super) Vec<u8>);

impl Token {
    /// True if `presented` is this token; the time taken depends only on
    /// the lengths.
    pub(super) fn matches(&self, presented: &[u8]) -> bool {
        if presented.len() != self.0.len() {
            return false;
        }
        let difference = self
            .0
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(difference) == 0
    }
}

/// A token nobody can guess: 244 random bits (two v4 UUIDs), as hex.
fn generate_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Where the tokens came from (what a non-loopback address requires).
pub(super) enum TokenSource {
    File,
    Environment,
    /// Generated into this private file.
    Generated(PathBuf),
}

/// The configured tokens: where they came from, the file that holds them
/// (canonical) if one does, and what the person starting the server must
/// be told (a token generated for them), for the caller to print.
pub(super) struct Loaded {
    pub(super) tokens: Vec<Token>,
    pub(super) source: TokenSource,
    pub(super) file: Option<PathBuf>,
    pub(super) notice: Option<String>,
}

fn check_token(token: &str, whence: &str) -> Result<(), ServeError> {
    if token.len() < MIN_TOKEN_LEN {
        return Err(ServeError::Token(format!(
            "the token {whence} is {} characters; at least {MIN_TOKEN_LEN} are needed (e.g. `openssl rand -hex 32`)",
            token.len()
        )));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ServeError::Token(format!(
            "the token {whence} has characters other than printable ASCII without spaces"
        )));
    }
    Ok(())
}

/// Writes `token` to a new file at `path`, readable by its owner only.
fn write_new_token(path: &Path, token: &str) -> Result<(), ServeError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| {
            ServeError::io(format!("create the token file {}", path.display()), source)
        })?;
    writeln!(file, "{token}").map_err(|source| {
        ServeError::io(format!("write the token file {}", path.display()), source)
    })
}

/// The configured tokens, from `--token-file`, else `$DSH_BASH_TOKEN`,
/// else generated into a private file.
pub(super) fn load_tokens(args: &HttpOptions) -> Result<Loaded, ServeError> {
    let (tokens, source, notice) = match &args.token_file {
        Some(path) => from_file(path)?,
        None => match std::env::var(TOKEN_ENV) {
            Ok(token) => {
                let token = token.trim().to_owned();
                check_token(&token, &format!("in ${TOKEN_ENV}"))?;
                (
                    vec![Token(token.into_bytes())],
                    TokenSource::Environment,
                    None,
                )
            }
            Err(_) => generated()?,
        },
    };
    let file = match source {
        TokenSource::File => args.token_file.clone(),
        TokenSource::Generated(ref path) => Some(path.clone()),
        TokenSource::Environment => None,
    };
    let file = file.map(|path| std::fs::canonicalize(&path).unwrap_or(path));
    Ok(Loaded {
        tokens,
        source,
        file,
        notice,
    })
}

/// Tokens found, where, and what to tell the person.
type Found = (Vec<Token>, TokenSource, Option<String>);

/// The tokens of the file at `path` (opened once: the mode checked is the
/// mode of the file read), or one generated into it if it does not exist.
fn from_file(path: &Path) -> Result<Found, ServeError> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let cannot_read = |source| ServeError::io(format!("read {}", path.display()), source);
    let mut file = match std::fs::File::open(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let token = generate_token();
            write_new_token(path, &token)?;
            let notice = format!(
                "generated a bearer token into {} (mode 0600)",
                path.display()
            );
            return Ok((
                vec![Token(token.into_bytes())],
                TokenSource::File,
                Some(notice),
            ));
        }
        Err(err) => return Err(cannot_read(err)),
        Ok(file) => file,
    };
    let meta = file.metadata().map_err(cannot_read)?;
    // Ours, like ssh wants its keys (the owner of /proc/self is this
    // process's user).
    if let Ok(me) = std::fs::metadata("/proc/self") {
        if meta.uid() != me.uid() {
            return Err(ServeError::Token(format!(
                "the token file {} belongs to uid {}, not to this server's user (uid {}); whoever owns it can change the token",
                path.display(),
                meta.uid(),
                me.uid()
            )));
        }
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ServeError::Token(format!(
            "the token file {} is readable by others (mode {mode:o}); run `chmod 600 {}`",
            path.display(),
            path.display()
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(cannot_read)?;
    let mut tokens = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        check_token(line, &format!("on line {} of {}", n + 1, path.display()))?;
        tokens.push(Token(line.as_bytes().to_vec()));
    }
    if tokens.is_empty() {
        return Err(ServeError::Token(format!(
            "the token file {} holds no token",
            path.display()
        )));
    }
    Ok((tokens, TokenSource::File, None))
}

/// A token generated into a private file of its own, told once.
fn generated() -> Result<Found, ServeError> {
    let token = generate_token();
    let dir = tempfile::Builder::new()
        .prefix("dsh-bash-token-")
        .tempdir()
        .map_err(|source| {
            ServeError::io("create a private directory for the generated token", source)
        })?
        .keep();
    let path = dir.join("token");
    write_new_token(&path, &token)?;
    let notice = format!(
        "bearer token (generated; also in {}, mode 0600): {token}",
        path.display()
    );
    Ok((
        vec![Token(token.into_bytes())],
        TokenSource::Generated(path),
        Some(notice),
    ))
}
