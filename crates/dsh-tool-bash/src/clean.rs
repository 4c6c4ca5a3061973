//! Clean text for the model: what a terminal would show, without what only
//! a terminal acts on. The spill files stay byte-exact; this is rendering.
//!
//! - control sequences are removed: CSI (`ESC [ … final`), OSC (`ESC ] …`
//!   to BEL or `ESC \`, a clipboard write among them), DCS, SOS, PM and APC
//!   strings, two-byte escapes, the C1 controls, and every C0 control but
//!   `\n` and `\t`;
//! - carriage-return redraws (progress bars, spinners) collapse to the
//!   line's final state, as a terminal would leave it (a backspace steps
//!   back over a character the same way);
//! - a run of more than [`RUN`] identical lines keeps the first and says
//!   how many more there were;
//! - the caller's text is already valid UTF-8 (invalid bytes were replaced
//!   with U+FFFD where the output was decoded).
//!
//! ```
//! let cleaned = dsh_tool_bash::clean::clean("\x1b[32mok\x1b[0m\r\n10%\r55%\r100%\n");
//! assert_eq!(cleaned.text, "ok\n100%\n");
//! assert_eq!(cleaned.sequences, 2);
//! assert_eq!(cleaned.redraws, 1);
//! ```

/// Identical consecutive lines kept before the rest of the run is counted.
pub const RUN: usize = 3;

/// The column a cursor move may reach past a line's end, at most: blanks
/// made by moves never take a line past it (`ESC [ 999 C x`, repeated,
/// adds one character each time, not a screenful).
const MAX_GAP: usize = 256;

/// Characters of an OSC/DCS/… string after which an unterminated one is
/// taken for text that happened to follow a stray escape.
const MAX_STRING: usize = 4096;

/// A cleaned text and what was taken out of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// The text as a terminal would leave it.
    pub text: String,
    /// Control sequences and control characters removed.
    pub sequences: usize,
    /// Lines redrawn over (by `\r` or backspace) whose earlier states were
    /// dropped.
    pub redraws: usize,
    /// Repeated lines folded into a count.
    pub repeats: usize,
}

impl Cleaned {
    /// What was removed, for the reader (`12 control sequences removed, …`),
    /// or `None` when nothing was.
    pub fn note(&self) -> Option<String> {
        let mut parts = Vec::new();
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        if self.sequences > 0 {
            parts.push(plural(
                self.sequences,
                "terminal control sequence removed",
                "terminal control sequences removed",
            ));
        }
        if self.redraws > 0 {
            parts.push(plural(
                self.redraws,
                "redrawn line shown in its final state",
                "redrawn lines shown in their final state",
            ));
        }
        if self.repeats > 0 {
            parts.push(plural(
                self.repeats,
                "repeated line folded",
                "repeated lines folded",
            ));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// Where the scanner is inside an escape.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    /// Right after `ESC`.
    Start,
    /// Inside `ESC [ …` until a final byte.
    Csi,
    /// Inside a string (OSC, DCS, SOS, PM, APC) until BEL or `ESC \`.
    String,
    /// An `ESC` inside a string: `\` ends it.
    StringEsc,
    /// After `ESC (` and the like: one more byte names a character set.
    Charset,
}

/// One line being drawn: its cells and the cursor.
#[derive(Default)]
struct Line {
    cells: Vec<char>,
    cursor: usize,
    redrawn: bool,
}

impl Line {
    /// The CSI sequences that redraw within a line, as a terminal does:
    /// `G` (to a column), `C`/`D` (right, left), `K` (erase in line). The
    /// rest (colours, cursor moves between lines) only change the look.
    fn csi(&mut self, params: &str, last: char) {
        // A move never reaches past the line's end by more than a screen's
        // width: `ESC [ 4000000000 G` must not make a 16 GiB line.
        let n: usize = params.parse().unwrap_or(0);
        let limit = self.cells.len().max(MAX_GAP);
        match last {
            'G' => self.cursor = (n.max(1) - 1).min(limit),
            'C' => self.cursor = self.cursor.saturating_add(n.max(1)).min(limit),
            'D' => self.cursor = self.cursor.saturating_sub(n.max(1)),
            'K' => {
                let keep = match n {
                    // To the end of the line, or the whole line.
                    0 => self.cursor,
                    2 => 0,
                    _ => return,
                };
                if keep < self.cells.len() {
                    self.cells.truncate(keep);
                    self.redrawn = true;
                }
                if n == 2 {
                    self.cursor = 0;
                }
            }
            _ => {}
        }
    }

    fn put(&mut self, c: char) {
        if self.cursor < self.cells.len() {
            self.cells[self.cursor] = c;
            self.redrawn = true;
        } else {
            // A cursor moved past the end leaves blanks, as on a screen.
            self.cells.resize(self.cursor, ' ');
            self.cells.push(c);
        }
        self.cursor += 1;
    }
}

/// `text` cleaned as described in the module docs.
pub fn clean(text: &str) -> Cleaned {
    let mut cleaned = Cleaned::default();
    let mut lines: Vec<String> = Vec::new();
    let mut line = Line::default();
    let mut escape = Escape::None;
    // A CSI's parameter bytes, for the few that move within the line.
    let mut params = String::new();
    // An OSC/DCS/… string so far: shown as text if it never ends.
    let mut string: Vec<char> = Vec::new();
    for c in text.chars() {
        if escape == Escape::Csi && ('\u{40}'..='\u{7e}').contains(&c) {
            line.csi(&params, c);
            params.clear();
            escape = end(&mut cleaned);
            continue;
        }
        if escape == Escape::Csi && ('\u{20}'..='\u{3f}').contains(&c) {
            params.push(c);
            continue;
        }
        if escape == Escape::Csi {
            // Not a CSI after all (text after a stray `ESC [`): the escape
            // goes, the character stays.
            params.clear();
            cleaned.sequences += 1;
            escape = Escape::None;
        }
        if matches!(escape, Escape::String | Escape::StringEsc) {
            string.push(c);
            // A line end or too long a string: not a string after all (a
            // stray escape), so it cannot swallow the lines after it (a
            // read's `[stderr]` section among them).
            if c == '\n' || string.len() > MAX_STRING {
                for kept in std::mem::take(&mut string) {
                    draw(&mut line, &mut lines, &mut cleaned, kept);
                }
                cleaned.sequences += 1;
                escape = Escape::None;
                continue;
            }
        }
        escape = match (escape, c) {
            (Escape::None, '\u{1b}') => Escape::Start,
            (Escape::None, '\u{9b}') => Escape::Csi,
            (Escape::None, '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}') => {
                string.clear();
                Escape::String
            }
            (Escape::None, c) => {
                draw(&mut line, &mut lines, &mut cleaned, c);
                Escape::None
            }
            (Escape::Start, '[') => Escape::Csi,
            (Escape::Start, ']' | 'P' | 'X' | '^' | '_') => {
                string.clear();
                Escape::String
            }
            // `ESC (`, `ESC )` and the like take exactly one more byte; the
            // rest are complete.
            (Escape::Start, '(' | ')' | '*' | '+' | '#' | '%') => Escape::Charset,
            (Escape::Charset, _) => end(&mut cleaned),
            (Escape::Start, _) => end(&mut cleaned),
            (Escape::Csi, _) => Escape::Csi,
            (Escape::String, '\u{7}' | '\u{9c}') => end(&mut cleaned),
            (Escape::String, '\u{1b}') => Escape::StringEsc,
            (Escape::String, _) => Escape::String,
            (Escape::StringEsc, '\\') => end(&mut cleaned),
            (Escape::StringEsc, _) => Escape::String,
        };
    }
    match escape {
        // A string never ended: what followed the stray escape is text.
        Escape::String | Escape::StringEsc => {
            for kept in std::mem::take(&mut string) {
                draw(&mut line, &mut lines, &mut cleaned, kept);
            }
            cleaned.sequences += 1;
        }
        Escape::None => {}
        _ => cleaned.sequences += 1,
    }
    let ended = text.ends_with('\n');
    if !line.cells.is_empty() || !ended {
        finish(&mut line, &mut lines, &mut cleaned);
    }
    cleaned.text = fold_repeats(&lines, ended, &mut cleaned.repeats);
    cleaned
}

fn end(cleaned: &mut Cleaned) -> Escape {
    cleaned.sequences += 1;
    Escape::None
}

/// Draws one printable or control character onto the line.
fn draw(line: &mut Line, lines: &mut Vec<String>, cleaned: &mut Cleaned, c: char) {
    match c {
        '\n' => finish(line, lines, cleaned),
        '\r' => line.cursor = 0,
        '\u{8}' => line.cursor = line.cursor.saturating_sub(1),
        '\t' => line.put('\t'),
        c if c.is_control() || invisible(c) => cleaned.sequences += 1,
        c => line.put(c),
    }
}

/// Characters that change what a reader sees without being seen: bidi
/// overrides and isolates, zero-width characters, the byte-order mark,
/// line and paragraph separators, and the tag characters (text hidden
/// from a person but read by a model).
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}'
        | '\u{feff}'
        | '\u{e0000}'..='\u{e007f}')
}

fn finish(line: &mut Line, lines: &mut Vec<String>, cleaned: &mut Cleaned) {
    if line.redrawn {
        cleaned.redraws += 1;
    }
    let drawn = std::mem::take(line);
    lines.push(drawn.cells.into_iter().collect());
}

/// The lines joined, each run of more than [`RUN`] identical lines kept to
/// [`RUN`] and a count.
fn fold_repeats(lines: &[String], ended: bool, folded: &mut usize) -> String {
    let mut text = String::new();
    let mut at = 0;
    while at < lines.len() {
        let run = lines[at..].iter().take_while(|l| **l == lines[at]).count();
        let kept = if run > RUN { RUN } else { run };
        for line in &lines[at..at + kept] {
            text.push_str(line);
            text.push('\n');
        }
        if run > kept {
            let more = run - kept;
            *folded += more;
            text.push_str(&format!("[the line above repeated {more} more times]\n"));
        }
        at += run;
    }
    if !ended {
        text.pop();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_of_every_kind_are_removed() {
        let noisy = "\x1b[2K\x1b[1Aa\x1b]52;c;ZXZpbA==\x07b\x1b]0;title\x1b\\c\x1bPq#0\x1b\\d\x1b(Be\u{9b}31mf\u{85}g\x00h\x7fi";
        let cleaned = clean(noisy);
        assert_eq!(cleaned.text, "abcdefghi");
        assert_eq!(cleaned.sequences, 10);
        assert_eq!(cleaned.redraws, 0);
        // An unterminated one at the end is removed too.
        assert_eq!(clean("x\x1b[31").text, "x");
    }

    #[test]
    fn redraws_keep_the_final_state_and_tabs_and_newlines_stay() {
        let bar = "Downloading  10%\rDownloading  55%\rDownloading 100%\ndone\tok\n";
        let cleaned = clean(bar);
        assert_eq!(cleaned.text, "Downloading 100%\ndone\tok\n");
        assert_eq!(cleaned.redraws, 1);
        // A shorter redraw leaves the tail a terminal would show; a
        // backspace steps back; \r\n is a plain line end.
        assert_eq!(clean("abcdef\rxy\n").text, "xycdef\n");
        assert_eq!(clean("ab\u{8}c\r\n").text, "ac\n");
        assert_eq!(clean("plain\r\nlines\r\n").redraws, 0);
        assert_eq!(clean("no newline").text, "no newline");
        assert_eq!(clean("").text, "");
    }

    /// npm's spinner: a glyph, back to column 1, erase to the end of line.
    #[test]
    fn spinners_that_redraw_with_csi_leave_their_final_state() {
        let spinner = "\u{2819}\x1b[1G\x1b[0K\u{2839}\x1b[1G\x1b[0K\r\nadded 8 packages in 1s\r\n\u{2807}\x1b[1G\x1b[0K";
        let cleaned = clean(spinner);
        assert_eq!(cleaned.text, "\nadded 8 packages in 1s\n");
        assert_eq!(cleaned.sequences, 6);
        assert_eq!(clean("ab\x1b[2Kc\n").text, "c\n");
        assert_eq!(clean("abcd\x1b[2D\x1b[Kx\n").text, "abx\n");
        assert_eq!(clean("a\x1b[3Cb\n").text, "a   b\n");
    }

    /// What a hostile or unlucky output cannot do: make a huge line out of
    /// a cursor move, or hide the rest of the output behind a stray escape.
    #[test]
    fn hostile_escapes_neither_grow_the_text_nor_hide_what_follows() {
        for huge in [
            "\x1b[4000000000Gx",
            "\x1b[18446744073709551615Gx",
            "\x1b[999999999C\x1b[999999999Cx",
        ] {
            let cleaned = clean(huge);
            assert!(
                cleaned.text.len() <= 2 * MAX_GAP + 1,
                "{huge:?}: {} bytes",
                cleaned.text.len()
            );
            assert!(cleaned.text.ends_with('x'));
        }
        // An OSC that never ends: what follows it stays, and a line end
        // ends it (the next line is never swallowed).
        let cleaned = clean("before \x1b]0;after it all\n");
        assert_eq!(cleaned.text, "before 0;after it all\n");
        assert_eq!(cleaned.sequences, 1);
        let split = clean("out\x1b]8;;\n[stderr]\nerr\x07\n");
        assert_eq!(split.text, "out8;;\n[stderr]\nerr\n");
        let long = format!("a\u{9d}{}", "text ".repeat(2000));
        assert!(clean(&long).text.starts_with("atext text"));
        // Moves repeated after each character add one character each.
        let repeated = "\x1b[999Cx".repeat(2000);
        assert!(
            clean(&repeated).text.len() <= MAX_GAP + 2000,
            "{}",
            clean(&repeated).text.len()
        );
        // What a reader cannot see is taken out: bidi overrides, zero
        // widths, tag characters.
        let hidden = clean("a\u{202e}b\u{200b}c\u{e0041}\u{e0042}d\u{feff}e");
        assert_eq!(hidden.text, "abcde");
        assert_eq!(hidden.sequences, 5);
        // Text after a stray `ESC [` is kept; `ESC ( B` takes one byte.
        assert_eq!(clean("x\x1b[\u{4e2d}\u{6587}y").text, "x\u{4e2d}\u{6587}y");
        assert_eq!(clean("\x1b(0 123 abc").text, " 123 abc");
    }

    #[test]
    fn long_runs_of_identical_lines_are_folded_with_a_count() {
        let text = "start\n".to_owned() + &"same\n".repeat(10) + "end";
        let cleaned = clean(&text);
        assert_eq!(
            cleaned.text,
            "start\nsame\nsame\nsame\n[the line above repeated 7 more times]\nend"
        );
        assert_eq!(cleaned.repeats, 7);
        assert_eq!(clean("a\na\na\n").text, "a\na\na\n");
        assert_eq!(cleaned.note().as_deref(), Some("7 repeated lines folded"));
        assert_eq!(clean("plain\n").note(), None);
    }
}
