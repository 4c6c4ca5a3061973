//! The docs: the book (docs/, mdBook) builds without a warning and no link
//! in it, nor in the README, points at a page or an anchor that does not
//! exist; the README stays short.
//!
//! Needs `mdbook` on PATH (`cargo install --locked --no-default-features
//! mdbook`); without it the book's tests skip loudly, and fail under
//! `DSH_TEST_REQUIRE_MDBOOK=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    std::path::absolute(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).unwrap()
}

/// The book built into a directory of the test's own, or a loud skip.
fn built_book(out: &Path) -> bool {
    let built = Command::new("mdbook")
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out)
        .output();
    let built = match built {
        Ok(built) => built,
        Err(err) => {
            let required = std::env::var("DSH_TEST_REQUIRE_MDBOOK").is_ok_and(|v| v == "1");
            let why = format!(
                "mdbook cannot run ({err}): cargo install --locked --no-default-features mdbook"
            );
            assert!(!required, "{why} (DSH_TEST_REQUIRE_MDBOOK=1)");
            eprintln!("SKIP the book: {why}");
            return false;
        }
    };
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    assert!(built.status.success(), "mdbook build failed:\n{log}");
    let complaints: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .collect();
    assert!(
        complaints.is_empty(),
        "mdbook complained:\n{}",
        complaints.join("\n")
    );
    true
}

/// Every `attr="…"` value in `html`.
fn attributes<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let needle = format!(" {attr}=\"");
    html.match_indices(&needle)
        .filter_map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

/// The built pages: path → the ids they hold.
fn pages(out: &Path) -> BTreeMap<PathBuf, (String, BTreeSet<String>)> {
    let mut pages = BTreeMap::new();
    let mut pending = vec![out.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "html") {
                let html = std::fs::read_to_string(&path).unwrap();
                let ids = attributes(&html, "id")
                    .into_iter()
                    .map(str::to_owned)
                    .collect();
                pages.insert(path, (html, ids));
            }
        }
    }
    pages
}

/// Why `link`, found on `page`, leads nowhere; `None` when it leads to a
/// page (and an anchor) that exists.
fn broken(
    pages: &BTreeMap<PathBuf, (String, BTreeSet<String>)>,
    out: &Path,
    page: &Path,
    link: &str,
) -> Option<String> {
    let external = ["http:", "https:", "mailto:", "javascript:"];
    if external.iter().any(|scheme| link.starts_with(scheme)) || link.is_empty() {
        return None;
    }
    let (file, anchor) = match link.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (link, None),
    };
    let file = file.split('?').next().unwrap_or_default();
    let target = if file.is_empty() {
        page.to_path_buf()
    } else {
        // A site-absolute link (404.html's) is from the book's root.
        let joined = match file.strip_prefix('/') {
            Some(from_root) => out.join(from_root),
            None => page.parent().unwrap().join(file),
        };
        let joined = if joined.is_dir() {
            joined.join("index.html")
        } else {
            joined
        };
        match std::fs::canonicalize(&joined) {
            Ok(target) => target,
            Err(_) => return Some(format!("no such file: {}", joined.display())),
        }
    };
    match (anchor, pages.get(&target)) {
        (Some(anchor), Some((_, ids))) if !anchor.is_empty() && !ids.contains(anchor) => {
            Some(format!("no id {anchor:?} in {}", target.display()))
        }
        _ => None,
    }
}

#[test]
fn the_book_builds_and_every_link_in_it_leads_somewhere() {
    let out = tempfile::tempdir().unwrap();
    if !built_book(out.path()) {
        return;
    }
    let out = std::fs::canonicalize(out.path()).unwrap();
    let pages = pages(&out);
    assert!(pages.len() > 10, "the book has {} pages", pages.len());
    let mut broken_links = Vec::new();
    let mut checked = 0;
    for (page, (html, _)) in &pages {
        for link in attributes(html, "href") {
            checked += 1;
            if let Some(why) = broken(&pages, &out, page, link) {
                broken_links.push(format!(
                    "{}: {link}: {why}",
                    page.strip_prefix(&out).unwrap().display()
                ));
            }
        }
    }
    assert!(checked > 100, "only {checked} links checked");
    assert!(
        broken_links.is_empty(),
        "broken links:\n{}",
        broken_links.join("\n")
    );
    readme_links_lead_into_the_book(&pages, &out);
}

/// The README's relative links name files of the checkout; one into the
/// book's sources with an anchor names an id of the built chapter.
fn readme_links_lead_into_the_book(
    pages: &BTreeMap<PathBuf, (String, BTreeSet<String>)>,
    out: &Path,
) {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut broken_links = Vec::new();
    for (at, _) in readme.match_indices("](") {
        let rest = &readme[at + 2..];
        let Some(end) = rest.find(')') else { continue };
        let link = &rest[..end];
        if link.starts_with("http:") || link.starts_with("https:") || link.starts_with('#') {
            continue;
        }
        let (file, anchor) = link
            .split_once('#')
            .map_or((link, None), |(f, a)| (f, Some(a)));
        if !root().join(file).exists() {
            broken_links.push(format!("{link}: no such file"));
            continue;
        }
        if let (Some(anchor), Some(chapter)) = (anchor, file.strip_prefix("docs/src/")) {
            let built = out.join(chapter.replace(".md", ".html"));
            let has = pages
                .get(&built)
                .is_some_and(|(_, ids)| ids.contains(anchor));
            if !has {
                broken_links.push(format!("{link}: no id {anchor:?} in the built chapter"));
            }
        }
    }
    assert!(
        broken_links.is_empty(),
        "README.md: {}",
        broken_links.join("\n")
    );
}

#[test]
fn the_readme_is_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; the rest belongs in docs/"
    );
}
