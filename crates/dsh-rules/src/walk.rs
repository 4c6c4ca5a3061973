//! Every simple command a script runs, from brush-parser's syntax tree:
//! lists, pipelines, subshells, groups, control flow, function bodies,
//! command and process substitutions, here-documents fed to a shell,
//! `bash -c` strings, `eval`, aliases defined on the way — each after
//! its wrappers.

use std::collections::HashMap;

use brush_parser::ast;
use brush_parser::{Parser, ParserOptions, SourceInfo};

use crate::programs::{self, Runs};
use crate::words::{self, Arg, Nested};

/// How deep strings inside strings are followed (`bash -c "sh -c '…'"`).
const MAX_DEPTH: usize = 8;

/// The most scripts (nested strings, alias uses) one command may make the
/// judge read: aliases of aliases multiply them.
const MAX_SCRIPTS: usize = 256;

/// The most bytes of script (nested strings and aliases counted again)
/// and the most simple commands one command may make the judge read.
const MAX_BYTES: usize = 4 << 20;
const MAX_PARTS: usize = 20_000;

/// The most openers (see [`openers`]) a command may hold to be parsed at
/// all; past it the command asks (bounding the parser's time and stack).
const MAX_OPENERS: usize = 4096;

/// Openers a command may hold to be parsed on the caller's thread: the
/// parser descends once per level (up to ~16 KiB of stack a level in a
/// debug build), so a deeper command is parsed on a thread of its own with
/// [`DEEP_STACK`], never on a server's runtime thread where `$($($(…)))`
/// thousands deep would overflow the stack and take the server down.
const INLINE_OPENERS: usize = 16;

/// The stack of the thread a deep command is parsed on (reserved, and
/// only touched as deep as the command goes).
const DEEP_STACK: usize = 256 << 20;

/// An upper bound on how deep `script` nests: every character or word
/// that could open a level (`(`, `{`, `` ` ``, `[[`, and the compound
/// commands' keywords, even inside other words), counted wherever it is.
pub fn openers(script: &str) -> usize {
    // `!`, `&&`/`||` (in `[[ ]]`) and unary `-`/`+` (in arithmetic)
    // nest in the parser too.
    let brackets = script
        .bytes()
        .filter(|b| matches!(b, b'(' | b'{' | b'`' | b'!' | b'&' | b'|' | b'-' | b'+'))
        .count();
    let keywords = ["if", "while", "until", "for", "case", "select", "[["]
        .iter()
        .map(|k| script.matches(k).count())
        .sum::<usize>();
    brackets + keywords
}

/// One simple command the script runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Its words, the program first (as its basename), wrappers removed.
    pub words: Vec<Arg>,
    /// Why it cannot be known before it runs; its words then say nothing.
    pub unknowable: Option<String>,
    /// The program was named by a path (`./npm`, `/tmp/x/npm`), not found
    /// on PATH: no allow rule stands for it.
    pub by_path: bool,
    /// Its output goes to a file by a redirection of the shell's: no allow
    /// rule stands for what the shell writes.
    pub writes: bool,
    /// It runs with assignments or a wrapper in front (`LD_PRELOAD=…`,
    /// `sudo`, `env X=…`): no allow rule stands for what those change.
    pub dressed: bool,
}

impl Part {
    fn unknowable(why: impl Into<String>) -> Self {
        Part {
            words: Vec::new(),
            unknowable: Some(why.into()),
            by_path: false,
            writes: false,
            dressed: false,
        }
    }

    /// A command that runs: its words, named by a path or not, wrapped
    /// or not (writes are marked by its redirections after).
    fn of(words: Vec<Arg>, by_path: bool, dressed: bool) -> Self {
        Part {
            words,
            unknowable: None,
            by_path,
            writes: false,
            dressed,
        }
    }

    /// The words as shown: unknown ones as `…`.
    pub fn shown(&self) -> String {
        if let Some(why) = &self.unknowable {
            return format!("({why})");
        }
        let words: Vec<&str> = self
            .words
            .iter()
            .map(|w| w.known().unwrap_or("…"))
            .collect();
        words.join(" ")
    }
}

/// Where a command's input comes from, as far as the parser knows.
enum Input {
    /// Not redirected here: a pipe or what the shell was given.
    Inherited,
    /// A here-document or here-string of known text.
    Text(String),
    /// Redirected from something not known (a file, an expansion).
    Unknown,
}

/// The walk over one command line and everything nested in it.
pub struct Walk {
    /// What was found.
    pub parts: Vec<Part>,
    /// The script being walked (locations index into it).
    current: String,
    /// Scripts that may still be read (aliases can multiply them).
    budget: usize,
    /// The budget ran out (said once).
    spent: bool,
    /// Bytes of script read so far.
    bytes: usize,
    options: ParserOptions,
    aliases: HashMap<String, String>,
}

impl Walk {
    /// Walks `script`, on a thread of its own with a deep stack when it
    /// nests more than a few levels (see [`INLINE_OPENERS`]).
    pub fn of(script: &str) -> Self {
        if openers(script) <= INLINE_OPENERS {
            return Walk::inline(script);
        }
        let walked = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("dsh-rules-parse".into())
                .stack_size(DEEP_STACK)
                .spawn_scoped(scope, || Walk::inline(script))
                .ok()
                .and_then(|thread| thread.join().ok())
        });
        walked.unwrap_or_else(|| {
            let mut walk = Walk::inline("");
            walk.parts.push(Part::unknowable(
                "no thread could be started to parse a command this deep",
            ));
            walk
        })
    }

    fn inline(script: &str) -> Self {
        let mut walk = Walk {
            parts: Vec::new(),
            current: String::new(),
            budget: MAX_SCRIPTS,
            spent: false,
            bytes: 0,
            options: ParserOptions::default(),
            aliases: HashMap::new(),
        };
        walk.script(script, 0);
        walk
    }

    fn script(&mut self, script: &str, depth: usize) {
        if self.budget == 0 {
            if !self.spent {
                self.spent = true;
                self.parts.push(Part::unknowable(format!(
                    "more than {MAX_SCRIPTS} nested strings and aliases, {MAX_BYTES} bytes or {MAX_PARTS} commands to read: too much to judge"
                )));
            }
            return;
        }
        self.budget -= 1;
        self.bytes = self.bytes.saturating_add(script.len());
        if self.bytes > MAX_BYTES || self.parts.len() > MAX_PARTS {
            self.budget = 0;
            return self.script(script, depth);
        }
        if depth > MAX_DEPTH {
            self.parts.push(Part::unknowable(format!(
                "strings nested deeper than {MAX_DEPTH} levels"
            )));
            return;
        }
        if openers(script) > MAX_OPENERS {
            self.parts.push(Part::unknowable(format!(
                "more than {MAX_OPENERS} groups, substitutions and compound commands: too deep to judge"
            )));
            return;
        }
        let reader = std::io::BufReader::new(script.as_bytes());
        let mut parser = Parser::new(reader, &self.options, &SourceInfo::default());
        match parser.parse_program() {
            Ok(program) => {
                let outer = std::mem::replace(&mut self.current, script.to_owned());
                for list in &program.complete_commands {
                    self.list(list, depth);
                }
                self.current = outer;
            }
            Err(err) => self.parts.push(Part::unknowable(format!(
                "the parser cannot read it: {err}"
            ))),
        }
    }

    fn list(&mut self, list: &ast::CompoundList, depth: usize) {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first, depth);
            for next in &and_or.additional {
                let (ast::AndOr::And(pipeline) | ast::AndOr::Or(pipeline)) = next;
                self.pipeline(pipeline, depth);
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, depth: usize) {
        for command in &pipeline.seq {
            self.command(command, depth);
        }
    }

    fn command(&mut self, command: &ast::Command, depth: usize) {
        match command {
            ast::Command::Simple(simple) => self.simple(simple, depth),
            ast::Command::Compound(compound, redirects) => {
                let from = self.parts.len();
                self.compound(compound, depth);
                let redirects = redirects.as_ref().map(|r| r.0.as_slice());
                self.redirects(redirects, depth);
                if redirects.unwrap_or_default().iter().any(writes_a_file) {
                    self.parts[from..].iter_mut().for_each(|p| p.writes = true);
                }
            }
            ast::Command::Function(function) => {
                self.compound(&function.body.0, depth);
                self.redirects(function.body.1.as_ref().map(|r| r.0.as_slice()), depth);
            }
            ast::Command::ExtendedTest(test) => self.test(&test.expr, depth),
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand, depth: usize) {
        use ast::CompoundCommand as C;
        match compound {
            C::Arithmetic(arithmetic) => self.arithmetic(arithmetic, depth),
            C::ArithmeticForClause(clause) => {
                for expr in [&clause.initializer, &clause.condition, &clause.updater]
                    .into_iter()
                    .flatten()
                {
                    self.raw(&expr.value);
                }
                self.list(&clause.body.list, depth);
            }
            C::BraceGroup(group) => self.list(&group.list, depth),
            C::Subshell(subshell) => self.list(&subshell.list, depth),
            C::ForClause(clause) => {
                for word in clause.values.iter().flatten() {
                    self.word(word, depth);
                }
                self.list(&clause.body.list, depth);
            }
            C::CaseClause(clause) => {
                self.word(&clause.value, depth);
                for item in &clause.cases {
                    for pattern in &item.patterns {
                        self.word(pattern, depth);
                    }
                    if let Some(list) = &item.cmd {
                        self.list(list, depth);
                    }
                }
            }
            C::IfClause(clause) => {
                self.list(&clause.condition, depth);
                self.list(&clause.then, depth);
                for other in clause.elses.iter().flatten() {
                    if let Some(condition) = &other.condition {
                        self.list(condition, depth);
                    }
                    self.list(&other.body, depth);
                }
            }
            C::WhileClause(clause) | C::UntilClause(clause) => {
                self.list(&clause.0, depth);
                self.list(&clause.1.list, depth);
            }
        }
    }

    fn test(&mut self, expr: &ast::ExtendedTestExpr, depth: usize) {
        use ast::ExtendedTestExpr as T;
        match expr {
            T::And(left, right) | T::Or(left, right) => {
                self.test(left, depth);
                self.test(right, depth);
            }
            T::Not(inner) | T::Parenthesized(inner) => self.test(inner, depth),
            T::UnaryTest(_, word) => {
                self.word(word, depth);
            }
            T::BinaryTest(_, left, right) => {
                self.word(left, depth);
                self.word(right, depth);
            }
        }
    }

    /// An arithmetic command as brush-parser reads it. Bash reads `((`
    /// as arithmetic only when the two parentheses touch at both ends and
    /// what is between them is an expression; otherwise (`( (git push) )`,
    /// `((git push) )`) as subshells, which run commands: those are
    /// judged as the subshells they are.
    fn arithmetic(&mut self, arithmetic: &ast::ArithmeticCommand, depth: usize) {
        self.raw(&arithmetic.expr.value);
        let source: String = self
            .current
            .chars()
            .skip(arithmetic.loc.start.index)
            .take(arithmetic.loc.length())
            .collect();
        let expression = source.starts_with("((")
            && source.ends_with("))")
            && brush_parser::arithmetic::parse(&arithmetic.expr.value).is_ok();
        if !expression {
            let inner = source
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or(&arithmetic.expr.value);
            let inner = inner.to_owned();
            self.script(&inner, depth + 1);
        }
    }

    /// Raw text the parser keeps unparsed (arithmetic): a substitution in
    /// it is not followed, so it asks.
    fn raw(&mut self, text: &str) {
        if words::substitutes(text) {
            self.parts.push(Part::unknowable(
                "a substitution inside an arithmetic expression",
            ));
        }
    }

    /// Reads a word, walking what it runs while expanded.
    fn word(&mut self, word: &ast::Word, depth: usize) -> Arg {
        let (arg, nested) = words::read(&word.value, &self.options);
        self.nested(nested, depth);
        arg
    }

    fn redirects(&mut self, redirects: Option<&[ast::IoRedirect]>, depth: usize) -> Input {
        let mut input = Input::Inherited;
        for redirect in redirects.unwrap_or_default() {
            if let Some(now) = self.redirect(redirect, depth) {
                input = now;
            }
        }
        input
    }

    /// Walks one redirection; what the command's input is now, if this
    /// redirection sets it.
    fn redirect(&mut self, redirect: &ast::IoRedirect, depth: usize) -> Option<Input> {
        use ast::IoRedirect as R;
        let on_input = |fd: &Option<ast::IoFd>| fd.is_none_or(|fd| fd == 0);
        match redirect {
            R::File(fd, kind, target) => {
                match target {
                    ast::IoFileRedirectTarget::Filename(word)
                    | ast::IoFileRedirectTarget::Duplicate(word) => {
                        self.word(word, depth);
                    }
                    ast::IoFileRedirectTarget::ProcessSubstitution(_, subshell) => {
                        self.list(&subshell.list, depth + 1);
                    }
                    ast::IoFileRedirectTarget::Fd(_) => {}
                }
                let reads = matches!(
                    kind,
                    ast::IoFileRedirectKind::Read
                        | ast::IoFileRedirectKind::ReadAndWrite
                        | ast::IoFileRedirectKind::DuplicateInput
                );
                (reads && on_input(fd)).then_some(Input::Unknown)
            }
            R::HereDocument(fd, doc) => {
                // An unquoted here-document is read as bash reads it:
                // backslash-newline joins lines, `\\`, `\$` and `` \` `` are
                // the characters themselves.
                let body = if doc.requires_expansion {
                    unescaped_heredoc(&doc.doc.value)
                } else {
                    doc.doc.value.clone()
                };
                let expands = doc.requires_expansion && (body.contains('$') || body.contains('`'));
                if expands {
                    self.heredoc_substitutions(&doc.doc.value.replace("\\\n", ""), depth);
                }
                on_input(fd).then_some(if expands {
                    Input::Unknown
                } else {
                    Input::Text(body)
                })
            }
            R::HereString(fd, word) => {
                let arg = self.word(word, depth);
                on_input(fd).then_some(match arg {
                    Arg::Known(text) => Input::Text(text),
                    Arg::Unknown(_) => Input::Unknown,
                })
            }
            R::OutputAndError(word, _) => {
                self.word(word, depth);
                None
            }
        }
    }

    /// The command substitutions an unquoted here-document runs while it
    /// is expanded.
    /// Walks what a word or a text runs while expanded.
    fn nested(&mut self, nested: Vec<Nested>, depth: usize) {
        for nested in nested {
            match nested {
                Nested::Script(script) => self.script(&script, depth + 1),
                Nested::Opaque(why) => self.parts.push(Part::unknowable(why)),
            }
        }
    }

    fn heredoc_substitutions(&mut self, body: &str, depth: usize) {
        self.nested(words::heredoc(body, &self.options), depth);
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, depth: usize) {
        let mut args = Vec::new();
        let mut input = Input::Inherited;
        for item in simple.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, &mut args, &mut input, false, depth);
        }
        if let Some(word) = &simple.word_or_name {
            args.push(self.word(word, depth));
        }
        let declares = simple.word_or_name.as_ref().is_some_and(|w| {
            matches!(
                w.value.as_str(),
                "export" | "declare" | "typeset" | "local" | "readonly"
            )
        });
        for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
            if let (true, ast::CommandPrefixOrSuffixItem::Word(word)) = (declares, item) {
                let arg = self.word(word, depth);
                self.assigned(&word.value, &arg, depth);
                args.push(arg);
                continue;
            }
            self.item(item, &mut args, &mut input, true, depth);
        }
        if !args.is_empty() {
            let from = self.parts.len();
            self.invocation(args, &input, depth);
            let items = simple.prefix.iter().flat_map(|p| p.0.iter());
            let items = items.chain(simple.suffix.iter().flat_map(|s| s.0.iter()));
            let writes = items.into_iter().any(|item| {
                matches!(item, ast::CommandPrefixOrSuffixItem::IoRedirect(r) if writes_a_file(r))
            });
            if writes {
                self.parts[from..].iter_mut().for_each(|p| p.writes = true);
            }
            let assigns = simple
                .prefix
                .iter()
                .flat_map(|p| p.0.iter())
                .any(|item| matches!(item, ast::CommandPrefixOrSuffixItem::AssignmentWord(..)));
            if assigns {
                self.parts[from..].iter_mut().for_each(|p| p.dressed = true);
            }
        }
    }

    fn item(
        &mut self,
        item: &ast::CommandPrefixOrSuffixItem,
        args: &mut Vec<Arg>,
        input: &mut Input,
        suffix: bool,
        depth: usize,
    ) {
        use ast::CommandPrefixOrSuffixItem as Item;
        match item {
            Item::IoRedirect(redirect) => {
                if let Some(now) = self.redirect(redirect, depth) {
                    *input = now;
                }
            }
            Item::Word(word) => args.push(self.word(word, depth)),
            Item::AssignmentWord(assignment, word) => {
                self.assignment_parts(assignment, depth);
                let arg = self.word(word, depth);
                self.assigned(&word.value, &arg, depth);
                if suffix {
                    args.push(arg);
                }
            }
            Item::ProcessSubstitution(_, subshell) => {
                self.list(&subshell.list, depth + 1);
                args.push(Arg::Unknown("a process substitution's path"));
            }
        }
    }

    /// An assignment (`NAME=value`, before a command or as `export`'s
    /// word): a variable bash runs as code has its value judged; one that
    /// changes which program a name runs makes what follows unknowable.
    fn assigned(&mut self, raw: &str, assignment: &Arg, depth: usize) {
        let Some((name, _)) = raw.split_once('=') else {
            return;
        };
        let name = name.trim_end_matches('+').trim_matches(['"', '\'']);
        let value = assignment
            .known()
            .and_then(|a| a.split_once('='))
            .map(|(_, v)| v);
        if matches!(name, "PROMPT_COMMAND" | "PS0" | "PS1" | "PS2" | "PS4") {
            match value {
                Some(value) => self.script(value, depth + 1),
                None => self.parts.push(Part::unknowable(format!(
                    "{name} is set to a value not known before it runs, and bash runs it"
                ))),
            }
        } else if matches!(name, "PATH" | "BASH_ENV" | "ENV" | "SHELLOPTS" | "BASHOPTS")
            || name.starts_with("BASH_CMDS")
            || name.starts_with("BASH_ALIASES")
        {
            self.parts.push(Part::unknowable(format!(
                "{name} is set: which program a name runs, or what a shell runs first, is not known"
            )));
        }
    }

    /// An array assignment's subscripts and elements, which bash expands
    /// (and evaluates as arithmetic) even when quoted: `a['$(cmd)']=1`.
    fn assignment_parts(&mut self, assignment: &ast::Assignment, depth: usize) {
        if let ast::AssignmentName::ArrayElementName(_, index) = &assignment.name {
            self.literal_code(index, depth);
        }
        if let ast::AssignmentValue::Array(elements) = &assignment.value {
            for (key, value) in elements {
                if let Some(key) = key {
                    self.word(key, depth);
                    self.literal_code(&key.value, depth);
                }
                self.word(value, depth);
            }
        }
    }

    /// Text bash may evaluate as code later (a subscript): every
    /// substitution in it, quoted or not, is judged.
    fn literal_code(&mut self, text: &str, depth: usize) {
        if !words::substitutes(text) {
            return;
        }
        let unquoted = text.replace(['\'', '"'], "");
        self.nested(words::heredoc(&unquoted, &self.options), depth);
    }

    /// What a simple command runs beside itself: an alias's expansion,
    /// the aliases it defines, `find`'s `-exec` commands.
    fn also_runs(&mut self, program: &str, args: &[Arg], depth: usize) {
        // bash -c expands no alias on the line that defines it (and
        // none without expand_aliases): both readings are judged.
        if let Some(value) = self.aliases.get(program).cloned() {
            self.aliased(&value, &args[1..], depth);
        }
        if program == "alias" {
            self.alias(&args[1..], depth);
        }
        if program == "find" {
            for command in programs::find_commands(args) {
                self.invocation(command, &Input::Inherited, depth);
            }
        }
    }

    /// What one simple command runs, wrappers and shells followed.
    fn invocation(&mut self, mut args: Vec<Arg>, input: &Input, depth: usize) {
        let mut wrapped = false;
        loop {
            // `time -- cmd`, `time -p -- cmd`: the keyword's `--`.
            while args.first().and_then(Arg::known) == Some("--") {
                args.remove(0);
            }
            let by_path = args
                .first()
                .and_then(Arg::known)
                .is_some_and(|p| p.contains('/'));
            let program = match args.first() {
                Some(Arg::Known(program)) => programs::basename(program).to_owned(),
                Some(Arg::Unknown(why)) => {
                    self.parts.push(Part::unknowable(format!(
                        "the program is {why}, not known before it runs"
                    )));
                    return;
                }
                None => return,
            };
            if let Some(first) = args.first_mut() {
                *first = Arg::Known(program.clone());
            }
            self.also_runs(&program, &args, depth);
            match programs::runs(&args) {
                Runs::Inner(inner) => {
                    args = inner;
                    wrapped = true;
                }
                Runs::Script(script) => {
                    self.parts.push(Part::of(args, by_path, wrapped));
                    self.script(&script, depth + 1);
                    return;
                }
                Runs::Input => {
                    self.parts.push(Part::of(args, by_path, wrapped));
                    match input {
                        Input::Text(text) => self.script(text, depth + 1),
                        Input::Inherited | Input::Unknown => self.parts.push(Part::unknowable(
                            format!("`{program}` reads the commands it runs from its input"),
                        )),
                    }
                    return;
                }
                Runs::Itself => {
                    self.parts.push(Part::of(args, by_path, wrapped));
                    return;
                }
                Runs::Unknowable(why) => {
                    self.parts.push(Part::unknowable(why));
                    return;
                }
            }
        }
    }

    /// `alias name=value…`: each value is judged as a command, and the
    /// name runs it for the rest of this script.
    fn alias(&mut self, definitions: &[Arg], depth: usize) {
        for definition in definitions {
            match definition {
                Arg::Known(text) => {
                    if let Some((name, value)) = text.split_once('=') {
                        self.script(value, depth + 1);
                        if value.ends_with(char::is_whitespace) {
                            self.parts.push(Part::unknowable(
                                "an alias ending in a space makes the next word an alias too",
                            ));
                        }
                        self.aliases.insert(name.to_owned(), value.to_owned());
                    }
                }
                Arg::Unknown(why) => self
                    .parts
                    .push(Part::unknowable(format!("an alias defined by {why}"))),
            }
        }
    }

    /// An alias used: its value, then the words after it.
    fn aliased(&mut self, value: &str, rest: &[Arg], depth: usize) {
        let mut script = value.to_owned();
        for word in rest {
            script.push(' ');
            match word {
                Arg::Known(text) => script.push_str(&quote(text)),
                Arg::Unknown(_) => script.push_str("\"$__dsh_unknown\""),
            }
        }
        self.script(&script, depth + 1);
    }
}

/// True if `redirect` sends output to a file (not a descriptor, not
/// `/dev/null` or the terminal's streams).
fn writes_a_file(redirect: &ast::IoRedirect) -> bool {
    use ast::IoFileRedirectKind as K;
    let harmless = |target: &str| {
        matches!(
            target,
            "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
        )
    };
    match redirect {
        ast::IoRedirect::File(_, kind, ast::IoFileRedirectTarget::Filename(word)) => {
            matches!(kind, K::Write | K::Append | K::Clobber | K::ReadAndWrite)
                && !harmless(&word.value)
        }
        ast::IoRedirect::OutputAndError(word, _) => !harmless(&word.value),
        _ => false,
    }
}

/// An unquoted here-document's body as the command reading it gets it
/// (before its expansions): `\<newline>` removed, `\\`, `\$` and
/// `` \` `` made the character itself.
fn unescaped_heredoc(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('\n') => {
                chars.next();
            }
            Some(&next @ ('\\' | '$' | '`')) => {
                chars.next();
                out.push(next);
            }
            _ => out.push(c),
        }
    }
    out
}

/// `text` as one single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
