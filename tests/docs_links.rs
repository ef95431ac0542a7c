//! The documentation's links and references resolve: README.md and every `docs/*.md` page.
//!
//! Checked, outside fenced code blocks and code spans:
//! - every relative link (`[text](path)`, `![alt](path)`, `[label]: path`, `<a href>`,
//!   `<img src>`) names a file or folder that exists, relative to the page that holds it;
//!   links with a scheme (`https:`, `mailto:`) are left alone;
//! - every `#anchor` (`path.md#anchor`, or `#anchor` for the same page) is a heading of the
//!   target page under GitHub's rule: the heading's text lowercased, every character but
//!   letters, digits, `-`, `_` and spaces dropped, spaces turned into `-`, and `-1`, `-2`, …
//!   added to repeated headings;
//! - every `§` reference names a numbered heading that exists. The form is `PAGE.md §N`
//!   (PAGE.md may be in backticks or be a link's text; a path relative to the page that
//!   holds the reference, like a link: `docs/hardware.md §4` in README.md, `hardware.md
//!   §4.2` in a page of docs/), or `§N` alone for a section of the same page. A numbered
//!   heading starts with its number: `## 4. MIG`, `### 4.2 Profiles`. A `§` inside a code
//!   span is literal text, not a reference;
//! - README.md shows the architecture picture, `docs/architecture.svg`, made from
//!   `docs/architecture.dot` beside it, and says the command that remakes it;
//! - README.md links every page of docs/ (its table of contents) and stays under 300 lines;
//! - every `hardware.md §N` in the code's comments (src, crates, tests, benches, fuzz) names a
//!   numbered section of docs/hardware.md.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The repository root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked: README.md, then docs/*.md in name order.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok())
        .map(|e| PathBuf::from("docs").join(e.file_name()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(rel: &Path) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` with its code spans removed (`` `a](b)` `` is no link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The link targets of one line (code spans already removed).
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Inline links and images: `](target)` or `](target "title")`.
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 1;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let inner = after[..end].trim();
        let target = inner
            .trim_start_matches('<')
            .split(|c: char| c.is_whitespace() || c == '>')
            .next()
            .unwrap_or("");
        out.push(target.to_string());
        rest = &after[end.min(after.len())..];
    }
    // Reference definitions: `[label]: target`.
    let t = line.trim_start();
    if t.starts_with('[') {
        if let Some(close) = t.find("]:") {
            if let Some(target) = t[close + 2..].split_whitespace().next() {
                out.push(target.to_string());
            }
        }
    }
    // HTML: href="…" and src="…".
    for attr in ["href=\"", "src=\""] {
        let mut rest = line;
        while let Some(at) = rest.find(attr) {
            let after = &rest[at + attr.len()..];
            let end = after.find('"').unwrap_or(after.len());
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

/// Whether `target` is a URL with a scheme (`https:`, `mailto:`), not a path.
fn has_scheme(target: &str) -> bool {
    match target.find(':') {
        Some(at) => {
            let scheme = &target[..at];
            !scheme.is_empty()
                && !scheme.contains('/')
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        }
        None => false,
    }
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    // Links in a heading count by their text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if end > close => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The headings of a page (outside code blocks), as (level, text).
fn headings(text: &str) -> Vec<(usize, String)> {
    prose_lines(text)
        .into_iter()
        .filter_map(|(_, line)| {
            let level = line.chars().take_while(|c| *c == '#').count();
            let rest = &line[level..];
            ((1..=6).contains(&level) && (rest.is_empty() || rest.starts_with(' ')))
                .then(|| (level, rest.trim().trim_end_matches('#').trim().to_string()))
        })
        .collect()
}

/// The anchors of a page's headings, repeated ones numbered as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, h) in headings(text) {
        let base = slug(&h);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The section numbers of a page's numbered headings (`## 4. MIG` → `4`, `### 4.2 X` → `4.2`).
fn section_numbers(text: &str) -> BTreeSet<String> {
    headings(text)
        .into_iter()
        .filter_map(|(_, h)| {
            let number: String = h
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.');
            let rest = &h[number.len()..];
            (!number.is_empty() && (rest.starts_with(' ') || rest.starts_with(". ")))
                .then(|| number.to_string())
        })
        .collect()
}

/// `base` (a page's folder, relative to the root) joined with `rel`, `..` resolved; `None`
/// when it leaves the repository.
fn resolve(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::Normal(s) => out.push(s),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with the links of `page` (relative to `root`), one line each.
fn broken_links(root: &Path, page: &Path, text: &str) -> Vec<String> {
    let dir = page.parent().unwrap_or(Path::new(""));
    let mut problems = Vec::new();
    for (n, line) in prose_lines(text) {
        for target in link_targets(&without_code_spans(line)) {
            let at = format!("{}:{n}", page.display());
            if target.is_empty() {
                problems.push(format!("{at}: an empty link"));
                continue;
            }
            if has_scheme(&target) {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.to_path_buf()
            } else {
                match resolve(dir, path) {
                    Some(f) => f,
                    None => {
                        problems.push(format!("{at}: {target} leaves the repository"));
                        continue;
                    }
                }
            };
            if !root.join(&file).exists() {
                problems.push(format!("{at}: {target}: {} does not exist", file.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                if file.extension().is_none_or(|x| x != "md") {
                    problems.push(format!(
                        "{at}: {target}: an anchor into a file that is not Markdown"
                    ));
                    continue;
                }
                let target_text = fs::read_to_string(root.join(&file)).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    problems.push(format!(
                        "{at}: {target}: {} has no heading with the anchor #{anchor}",
                        file.display()
                    ));
                }
            }
        }
    }
    problems
}

/// What is wrong with the `§` references of `page`, one line each.
fn broken_sections(root: &Path, page: &Path, text: &str) -> Vec<String> {
    let dir = page.parent().unwrap_or(Path::new(""));
    let mut problems = Vec::new();
    for (n, line) in prose_lines(text) {
        let mut rest = line;
        let mut offset = 0;
        while let Some(at) = rest.find('§') {
            let before = &line[..offset + at];
            let after = &rest[at + '§'.len_utf8()..];
            rest = after;
            offset = line.len() - rest.len();
            // A `§` in a code span is literal text (`PAGE.md §N` in this very description).
            if before.matches('`').count() % 2 == 1 {
                continue;
            }
            let number: String = after
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.');
            let place = format!("{}:{n}", page.display());
            if number.is_empty() {
                problems.push(format!("{place}: a § without a section number"));
                continue;
            }
            // The word before `§`, with backticks, link brackets and quotes taken off.
            let word = before
                .trim_end()
                .rsplit(char::is_whitespace)
                .next()
                .unwrap_or("")
                .trim_matches(|c: char| "`[](\"'".contains(c));
            let target = if word.ends_with(".md") {
                match resolve(dir, word) {
                    Some(f) => f,
                    None => {
                        problems.push(format!("{place}: {word} §{number} leaves the repository"));
                        continue;
                    }
                }
            } else {
                page.to_path_buf()
            };
            let Ok(target_text) = fs::read_to_string(root.join(&target)) else {
                problems.push(format!(
                    "{place}: §{number} of {}, which does not exist",
                    target.display()
                ));
                continue;
            };
            if !section_numbers(&target_text).contains(number) {
                problems.push(format!(
                    "{place}: {} has no section numbered {number}",
                    target.display()
                ));
            }
        }
    }
    problems
}

/// Runs `check` on every page and fails with what it found.
fn assert_every_page(what: &str, check: fn(&Path, &Path, &str) -> Vec<String>) {
    let root = root();
    let problems: Vec<String> = pages()
        .iter()
        .flat_map(|p| check(&root, p, &read(p)))
        .collect();
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

#[test]
fn every_link_resolves() {
    assert_every_page("broken links", broken_links);
}

#[test]
fn every_section_reference_resolves() {
    assert_every_page("broken § references", broken_sections);
}

#[test]
fn the_readme_shows_the_picture_and_how_to_remake_it() {
    let readme = read(Path::new("README.md"));
    let images: Vec<String> = prose_lines(&readme)
        .into_iter()
        .filter(|(_, l)| l.contains("!["))
        .flat_map(|(_, l)| link_targets(&without_code_spans(l)))
        .collect();
    assert!(
        images.iter().any(|t| t == "docs/architecture.svg"),
        "README.md shows no docs/architecture.svg (images: {images:?})"
    );
    let svg = read(Path::new("docs/architecture.svg"));
    assert!(svg.contains("<svg"), "docs/architecture.svg is no SVG");
    let dot = read(Path::new("docs/architecture.dot"));
    assert!(
        dot.contains("digraph"),
        "docs/architecture.dot is no Graphviz graph"
    );
    assert!(
        readme.contains("dot -Tsvg docs/architecture.dot -o docs/architecture.svg"),
        "README.md does not say the command that remakes the picture"
    );
}

#[test]
fn the_readme_lists_every_page_and_stays_short() {
    let readme = read(Path::new("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines, more than 300: move text to docs/"
    );
    let linked: BTreeSet<PathBuf> = prose_lines(&readme)
        .into_iter()
        .flat_map(|(_, l)| link_targets(&without_code_spans(l)))
        .filter_map(|t| resolve(Path::new(""), t.split('#').next().unwrap_or("")))
        .collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .skip(1)
        .filter(|p| !linked.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's contents do not link: {}",
        missing.join(", ")
    );
}

/// The files under `dir` (relative to the root) whose names end in one of `extensions`.
fn files_under(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(root().join(dir)) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let rel = dir.join(entry.file_name());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            files_under(&rel, extensions, out);
        } else if rel
            .extension()
            .is_some_and(|x| extensions.iter().any(|e| x == *e))
        {
            out.push(rel);
        }
    }
}

/// The code's comments cite the hardware facts as `hardware.md §N` (also `hardware.md §2,
/// §5.10`): each names a numbered section of docs/hardware.md.
#[test]
fn the_codes_hardware_references_resolve() {
    let sections = section_numbers(&read(Path::new("docs/hardware.md")));
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "benches", "fuzz"] {
        files_under(Path::new(dir), &["rs", "md"], &mut files);
    }
    let mut problems = Vec::new();
    let mut cited = 0;
    // This file names the form itself.
    for file in files.iter().filter(|f| !f.ends_with("docs_links.rs")) {
        let text = read(file);
        for (n, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("hardware.md") {
                rest = &rest[at + "hardware.md".len()..];
                // The references that follow, up to the end of the parenthesis or sentence.
                let end = rest.find([')', ':', ';']).unwrap_or(rest.len());
                for part in rest[..end].split('§').skip(1) {
                    let number: String = part
                        .trim_start()
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.')
                        .collect();
                    let number = number.trim_end_matches('.');
                    cited += 1;
                    if !sections.contains(number) {
                        problems.push(format!(
                            "{}:{}: hardware.md §{number} is no section of docs/hardware.md",
                            file.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        cited > 0,
        "no hardware.md § reference found: is the search broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself: a broken link, anchor and reference in a small tree are reported,
/// good ones are not.
#[test]
fn the_checker_finds_what_is_broken() {
    let dir = std::env::temp_dir().join(format!("vgpud-docs-links-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("docs")).expect("temporary tree");
    fs::write(
        dir.join("docs/page.md"),
        "# Page\n\n## 3. Things, `code` and more\n\n## Twice\n\n## Twice\n\n```sh\n# not a heading\n```\n",
    )
    .expect("page");
    let page = Path::new("README.md");
    let good = "[a](docs/page.md) [b](docs/page.md#3-things-code-and-more) [c](docs/page.md#twice-1) \
                [d](docs/) [e](https://example.org/x) see `docs/page.md` §3, [`x`](#readme), `PAGE.md §N`\n\
                # Readme\n";
    fs::write(dir.join("README.md"), good).expect("readme");
    assert_eq!(broken_links(&dir, page, good), Vec::<String>::new());
    assert_eq!(broken_sections(&dir, page, good), Vec::<String>::new());
    let bad = "[a](docs/gone.md) [b](docs/page.md#not-a-heading) [c](docs/page.md#twice-2)\n\
               `docs/page.md` §4, page.md §3, § alone\n\
               ```\n[in code](nowhere.md) §9\n```\n";
    let links = broken_links(&dir, page, bad);
    assert_eq!(links.len(), 3, "{links:?}");
    assert!(
        links[0].contains("docs/gone.md does not exist"),
        "{links:?}"
    );
    assert!(links[1].contains("#not-a-heading"), "{links:?}");
    let sections = broken_sections(&dir, page, bad);
    assert_eq!(sections.len(), 3, "{sections:?}");
    assert!(
        sections[0].contains("no section numbered 4"),
        "{sections:?}"
    );
    assert!(
        sections[1].contains("page.md, which does not exist"),
        "{sections:?}"
    );
    assert!(
        sections[2].contains("without a section number"),
        "{sections:?}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn anchors_follow_githubs_rule() {
    assert_eq!(
        slug("What survives what, and where state lives"),
        "what-survives-what-and-where-state-lives"
    );
    assert_eq!(
        slug("oVirt (`integrations/ovirt/`)"),
        "ovirt-integrationsovirt"
    );
    assert_eq!(
        slug("4.2 The scheduler: RmPVMRL"),
        "42-the-scheduler-rmpvmrl"
    );
    assert_eq!(
        slug("The login storm (`cargo bench --bench storm`)"),
        "the-login-storm-cargo-bench---bench-storm"
    );
    assert_eq!(slug("See [the API](api.md)"), "see-the-api");
}
