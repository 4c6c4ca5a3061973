//! From the changes logged while a command ran to what it created,
//! modified and deleted.

use std::collections::BTreeMap;

use dsh_bash::WorkspaceChanges;

/// Paths listed at most, over the three lists; the rest are counted.
pub(super) const MAX_LISTED: usize = 20;

/// One thing that happened to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum What {
    /// Created, or moved in.
    Appeared,
    /// Written to, or its attributes changed.
    Altered,
    /// Deleted, or moved away.
    Vanished,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Change {
    pub(super) path: String,
    pub(super) what: What,
}

/// A path's fate over the whole run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Created,
    Modified,
    Deleted,
    /// Created and deleted again: nothing to report.
    Passed,
}

fn next(fate: Option<Fate>, what: What) -> Fate {
    match (fate, what) {
        (None | Some(Fate::Passed | Fate::Created), What::Appeared) => Fate::Created,
        (Some(Fate::Deleted | Fate::Modified), What::Appeared) => Fate::Modified,
        (None, What::Altered) => Fate::Modified,
        (Some(fate), What::Altered) => fate,
        (Some(Fate::Created | Fate::Passed), What::Vanished) => Fate::Passed,
        (None | Some(Fate::Modified | Fate::Deleted), What::Vanished) => Fate::Deleted,
    }
}

/// The created, modified and deleted paths of `changes` (in order), what
/// is inside a created or deleted directory folded into it, at most
/// [`MAX_LISTED`] listed.
pub(super) fn judge<'a>(changes: impl Iterator<Item = &'a Change>) -> WorkspaceChanges {
    let mut fates: BTreeMap<&str, Fate> = BTreeMap::new();
    for change in changes {
        let fate = fates.get(change.path.as_str()).copied();
        fates.insert(&change.path, next(fate, change.what));
    }
    let mut facts = WorkspaceChanges::default();
    let mut folded: Option<&str> = None;
    let mut listed = 0;
    for (path, fate) in fates {
        if folded.is_some_and(|dir| path.starts_with(dir)) {
            continue;
        }
        // What was inside a directory that came and went, or went, went
        // with it.
        if fate == Fate::Passed && path.ends_with('/') {
            folded = Some(path);
        }
        let list = match fate {
            Fate::Passed => continue,
            Fate::Created => &mut facts.created,
            Fate::Modified => &mut facts.modified,
            Fate::Deleted => &mut facts.deleted,
        };
        if path.ends_with('/') && fate != Fate::Modified {
            folded = Some(path);
        }
        if listed < MAX_LISTED {
            list.push(path.to_owned());
            listed += 1;
        } else {
            facts.more += 1;
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, what: What) -> Change {
        Change {
            path: path.to_owned(),
            what,
        }
    }

    #[test]
    fn each_path_gets_its_fate_over_the_whole_run() {
        let log = [
            change("new.txt", What::Appeared),
            change("new.txt", What::Altered),
            change("Cargo.toml", What::Altered),
            change("old.txt", What::Vanished),
            change("tmp", What::Appeared),
            change("tmp", What::Vanished),
            change("replaced", What::Vanished),
            change("replaced", What::Appeared),
        ];
        let facts = judge(log.iter());
        assert_eq!(facts.created, ["new.txt"]);
        assert_eq!(facts.modified, ["Cargo.toml", "replaced"]);
        assert_eq!(facts.deleted, ["old.txt"]);
        assert_eq!(facts.more, 0);
    }

    #[test]
    fn what_is_inside_a_created_or_deleted_directory_folds_into_it() {
        let log = [
            change("gen/", What::Appeared),
            change("gen/a.rs", What::Appeared),
            change("gen/sub/", What::Appeared),
            change("gen/sub/b.rs", What::Altered),
            change("gone/x", What::Vanished),
            change("gone/", What::Vanished),
            change("general.txt", What::Appeared),
        ];
        let facts = judge(log.iter());
        assert_eq!(facts.created, ["gen/", "general.txt"]);
        assert_eq!(facts.deleted, ["gone/"]);
        assert!(facts.modified.is_empty());
    }

    #[test]
    fn what_was_in_a_directory_that_came_and_went_is_not_listed() {
        // mkdir a; touch a/x; mv a b
        let log = [
            change("a/", What::Appeared),
            change("a/x", What::Appeared),
            change("a/", What::Vanished),
            change("b/", What::Appeared),
        ];
        let facts = judge(log.iter());
        assert_eq!(facts.created, ["b/"]);
        assert!(facts.modified.is_empty() && facts.deleted.is_empty(), "{facts:?}");
    }

    #[test]
    fn past_the_limit_paths_are_counted_not_listed() {
        let log: Vec<Change> = (0..MAX_LISTED + 5)
            .map(|i| change(&format!("f{i:03}"), What::Appeared))
            .collect();
        let facts = judge(log.iter());
        assert_eq!(facts.created.len(), MAX_LISTED);
        assert_eq!(facts.more, 5);
    }
}
