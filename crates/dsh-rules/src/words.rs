//! One shell word as it will be when the command runs: its text with
//! quotes and backslashes removed, or unknown (an expansion, a glob, a
//! brace expansion), plus the scripts it runs on the way (command and
//! process substitutions).

use brush_parser::word::WordPiece;
use brush_parser::ParserOptions;

/// One word of a simple command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// Its text when the command runs.
    Known(String),
    /// Only known when the command runs (why).
    Unknown(&'static str),
}

impl Arg {
    /// The text, if known.
    pub fn known(&self) -> Option<&str> {
        match self {
            Arg::Known(text) => Some(text),
            Arg::Unknown(_) => None,
        }
    }
}

/// Something a word runs while it is expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nested {
    /// A script, to be judged in its turn (a command substitution).
    Script(String),
    /// Code the parser cannot follow (why).
    Opaque(&'static str),
}

/// True if `text` holds what could start a substitution.
pub fn substitutes(text: &str) -> bool {
    text.contains("$(") || text.contains('`') || text.contains("<(") || text.contains(">(")
}

/// True if an unquoted `text` would be a pathname pattern.
fn globs(text: &str) -> bool {
    let bracket = text
        .find('[')
        .is_some_and(|open| text[open + 1..].contains(']'));
    let extglob = ["@(", "!(", "+("].iter().any(|p| text.contains(p));
    text.contains('*') || text.contains('?') || bracket || extglob
}

/// Reads a word: `(its value, what it runs while expanded)`.
pub fn read(raw: &str, options: &ParserOptions) -> (Arg, Vec<Nested>) {
    let mut nested = Vec::new();
    let Ok(pieces) = brush_parser::word::parse(raw, options) else {
        nested.push(Nested::Opaque("a word the parser cannot read"));
        return (Arg::Unknown("a word the parser cannot read"), nested);
    };
    let mut text = String::new();
    let mut unknown = None;
    for piece in &pieces {
        let source = raw.get(piece.start_index..piece.end_index).unwrap_or(raw);
        if let Err(why) = piece_text(&piece.piece, source, false, &mut text, &mut nested) {
            unknown.get_or_insert(why);
        }
    }
    // Quotes inside a pattern or a brace expansion do not stop it.
    let (glob, brace) = unquoted_specials(raw);
    if brace {
        unknown.get_or_insert("a brace expansion");
    } else if glob {
        unknown.get_or_insert("a pathname pattern");
    }
    // A literal that holds a substitution is code bash may still run (an
    // array subscript in arithmetic, a prompt string, `${x@P}`).
    if unknown.is_none() && substitutes(&text) {
        nested.extend(heredoc(&text, options));
    }
    match unknown {
        Some(why) => (Arg::Unknown(why), nested),
        None => (Arg::Known(text), nested),
    }
}

/// Whether `raw` (a word as written) holds, outside quotes and escapes, a
/// pathname pattern (`*`, `?`, `[…]`) or a brace expansion (`{a,b}`,
/// `{1..3}`), even with quoted text between its parts (`g['i']t`,
/// `{git,'push'}`).
fn unquoted_specials(raw: &str) -> (bool, bool) {
    let mut glob = false;
    let (mut bracket, mut brace, mut comma) = (false, 0usize, false);
    let mut brace_found = false;
    let (mut single, mut double, mut escaped) = (false, false, false);
    let mut previous = '\0';
    for c in raw.chars() {
        if escaped {
            escaped = false;
            previous = c;
            continue;
        }
        match c {
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            _ if single || double => {}
            '*' | '?' => glob = true,
            '[' => bracket = true,
            ']' if bracket => glob = true,
            '{' if previous != '$' => brace += 1,
            ',' if brace > 0 => comma = true,
            '.' if brace > 0 && previous == '.' => comma = true,
            '}' if brace > 0 => {
                brace -= 1;
                brace_found |= comma;
            }
            _ => {}
        }
        previous = c;
    }
    (glob, brace_found)
}

/// What an unquoted here-document's body runs while it is expanded: its
/// command substitutions (read as a double-quoted word would be).
pub fn heredoc(body: &str, options: &ParserOptions) -> Vec<Nested> {
    for quoted in [
        format!("\"{body}\""),
        format!("\"{}\"", body.replace('"', "\\\"")),
    ] {
        if let Ok(pieces) = brush_parser::word::parse(&quoted, options) {
            let mut text = String::new();
            let mut nested = Vec::new();
            for piece in &pieces {
                let source = quoted.get(piece.start_index..piece.end_index).unwrap_or("");
                let _ = piece_text(&piece.piece, source, true, &mut text, &mut nested);
            }
            return nested;
        }
    }
    if substitutes(body) {
        return vec![Nested::Opaque("a here-document the parser cannot read")];
    }
    Vec::new()
}

/// What a parameter expansion's words run (`${x:-$(cmd)}`): its inside
/// read as a double-quoted word, or opaque if that cannot be read.
fn inside_expansion(source: &str) -> Vec<Nested> {
    let inside = source
        .strip_prefix("${")
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or(source);
    let quoted = format!("\"{inside}\"");
    let mut found = Vec::new();
    if let Ok(pieces) = brush_parser::word::parse(&quoted, &ParserOptions::default()) {
        let mut text = String::new();
        for piece in &pieces {
            let source = quoted.get(piece.start_index..piece.end_index).unwrap_or("");
            let _ = piece_text(&piece.piece, source, true, &mut text, &mut found);
        }
    }
    if found.is_empty() {
        found.push(Nested::Opaque(
            "a substitution inside a parameter expansion",
        ));
    }
    found
}

/// Appends one piece's text to `text`; `Err(why)` when it is unknown.
fn piece_text(
    piece: &WordPiece,
    source: &str,
    quoted: bool,
    text: &mut String,
    nested: &mut Vec<Nested>,
) -> Result<(), &'static str> {
    match piece {
        WordPiece::Text(s) => {
            if !quoted && globs(s) {
                return Err("a pathname pattern");
            }
            text.push_str(s);
        }
        WordPiece::SingleQuotedText(s) => text.push_str(s),
        WordPiece::AnsiCQuotedText(s) => {
            if s.contains('\\') {
                return Err("an ANSI-C quoted string with escapes");
            }
            text.push_str(s);
        }
        WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
            let mut unknown = Ok(());
            for piece in inner {
                let source = source.get(piece.start_index..piece.end_index).unwrap_or("");
                if let Err(why) = piece_text(&piece.piece, source, true, text, nested) {
                    unknown = unknown.and(Err(why));
                }
            }
            return unknown;
        }
        WordPiece::TildePrefix(s) => {
            text.push('~');
            text.push_str(s);
        }
        WordPiece::EscapeSequence(s) => {
            let escaped = s.strip_prefix('\\').unwrap_or(s);
            if escaped != "\n" {
                text.push_str(escaped);
            }
        }
        WordPiece::CommandSubstitution(script)
        | WordPiece::BackquotedCommandSubstitution(script) => {
            nested.push(Nested::Script(script.clone()));
            return Err("a command substitution");
        }
        WordPiece::ParameterExpansion(_) => {
            if substitutes(source) {
                nested.extend(inside_expansion(source));
            }
            if source.contains("@P") {
                nested.push(Nested::Opaque(
                    "a prompt expansion (`@P`) runs the substitutions in a variable's value",
                ));
            }
            return Err("a parameter expansion");
        }
        WordPiece::ArithmeticExpression(expr) => {
            if substitutes(&expr.value) || substitutes(source) {
                nested.push(Nested::Opaque(
                    "a substitution inside an arithmetic expression",
                ));
            }
            return Err("an arithmetic expansion");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(raw: &str) -> Arg {
        read(raw, &ParserOptions::default()).0
    }

    #[test]
    fn quotes_and_backslashes_are_removed() {
        for raw in [
            "git", "'git'", "\"git\"", "g\\it", "gi''t", "g\"\"it", "$'git'", "\\git",
        ] {
            assert_eq!(value(raw), Arg::Known("git".into()), "{raw}");
        }
        assert_eq!(value("~/bin/x"), Arg::Known("~/bin/x".into()));
    }

    #[test]
    fn expansions_are_unknown_and_substitutions_are_followed() {
        for raw in [
            "$CMD",
            "${CMD}",
            "pu*",
            "{push,pull}",
            "$'\\x67it'",
            "$((1+2))",
            "\"$X\"",
        ] {
            assert!(matches!(value(raw), Arg::Unknown(_)), "{raw}");
        }
        let (arg, nested) = read("$(git push)", &ParserOptions::default());
        assert!(matches!(arg, Arg::Unknown(_)));
        assert_eq!(nested, vec![Nested::Script("git push".into())]);
        let (_, nested) = read("\"a `git push` b\"", &ParserOptions::default());
        assert_eq!(nested.len(), 1, "{nested:?}");
        let (_, nested) = read("${X:-$(git push)}", &ParserOptions::default());
        assert_eq!(nested, vec![Nested::Script("git push".into())]);
        // Brackets without a close, quoted patterns: plain text.
        assert_eq!(value("["), Arg::Known("[".into()));
        assert_eq!(value("'*'"), Arg::Known("*".into()));
    }
}
