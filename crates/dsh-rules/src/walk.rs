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
    let brackets = script
        .bytes()
        .filter(|b| matches!(b, b'(' | b'{' | b'`'))
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
}

impl Part {
    fn unknowable(why: impl Into<String>) -> Self {
        Part {
            words: Vec::new(),
            unknowable: Some(why.into()),
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
            options: ParserOptions::default(),
            aliases: HashMap::new(),
        };
        walk.script(script, 0);
        walk
    }

    fn script(&mut self, script: &str, depth: usize) {
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
                self.compound(compound, depth);
                self.redirects(redirects.as_ref().map(|r| r.0.as_slice()), depth);
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
        for nested in nested {
            match nested {
                Nested::Script(script) => self.script(&script, depth + 1),
                Nested::Opaque(why) => self.parts.push(Part::unknowable(why)),
            }
        }
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
                    ast::IoFileRedirectKind::Read | ast::IoFileRedirectKind::ReadAndWrite
                );
                (reads && on_input(fd)).then_some(Input::Unknown)
            }
            R::HereDocument(fd, doc) => {
                let body = &doc.doc.value;
                let expands = doc.requires_expansion && (body.contains('$') || body.contains('`'));
                if expands {
                    self.heredoc_substitutions(body, depth);
                }
                on_input(fd).then(|| {
                    if expands {
                        Input::Unknown
                    } else {
                        Input::Text(body.clone())
                    }
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
    fn heredoc_substitutions(&mut self, body: &str, depth: usize) {
        for nested in words::heredoc(body, &self.options) {
            match nested {
                Nested::Script(script) => self.script(&script, depth + 1),
                Nested::Opaque(why) => self.parts.push(Part::unknowable(why)),
            }
        }
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
        for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, &mut args, &mut input, true, depth);
        }
        if !args.is_empty() {
            self.invocation(args, &input, depth);
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
            Item::AssignmentWord(_, word) => {
                let arg = self.word(word, depth);
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

    /// What one simple command runs, wrappers and shells followed.
    fn invocation(&mut self, mut args: Vec<Arg>, input: &Input, depth: usize) {
        loop {
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
            if let Some(value) = self.aliases.get(&program).cloned() {
                self.aliased(&value, &args[1..], depth);
                return;
            }
            if program == "alias" {
                self.alias(&args[1..], depth);
            }
            if program == "find" {
                for command in programs::find_commands(&args) {
                    self.invocation(command, &Input::Inherited, depth);
                }
            }
            match programs::runs(&args) {
                Runs::Inner(inner) => args = inner,
                Runs::Script(script) => {
                    self.parts.push(Part {
                        words: args,
                        unknowable: None,
                    });
                    self.script(&script, depth + 1);
                    return;
                }
                Runs::Input => {
                    self.parts.push(Part {
                        words: args,
                        unknowable: None,
                    });
                    match input {
                        Input::Text(text) => self.script(text, depth + 1),
                        Input::Inherited | Input::Unknown => self.parts.push(Part::unknowable(
                            format!("`{program}` reads the commands it runs from its input"),
                        )),
                    }
                    return;
                }
                Runs::Itself => {
                    self.parts.push(Part {
                        words: args,
                        unknowable: None,
                    });
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

/// `text` as one single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
