//! The docs' indexes, checked against the code: every test that the maintainers' table of
//! `docs/failure-model.md` names exists where the table says, and the README stays a front
//! door (short, no line too long to read, no issue numbers, no link to a missing page).
//!
//! How the table's last column names a test (its section in `docs/failure-model.md` says
//! it too): a cell names its file first (`fenced_lock.rs`, a file of `tests/`), and the
//! names after it, up to the next file, are in that file; names before any file are in
//! `tests/failure_model.rs`. A module followed by "unit test" or "unit tests"
//! (`memory::store`, `fixed_window/redis.rs`) names a module of `src/`, and the names after
//! it are its unit tests. `holding_rules::<name>` is a rule of `tests/support/holding.rs`.
//! Any other backticked word of the column must be a command (`FLUSHALL`), in capitals.

use std::fs;
use std::path::{Path, PathBuf};

/// The rows of the maintainers' table when it moved out of the README: it may grow, never
/// shrink.
const FAILURE_TABLE_ROWS: usize = 109;

/// The README's limits: a front door, not a manual.
const README_MAX_LINES: usize = 250;
const README_MAX_LINE_LEN: usize = 200;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// Whether `source` defines a function `name` (`fn name(`, `async fn name(`, `fn name<`).
fn defines(source: &str, name: &str) -> bool {
    source.contains(&format!("fn {name}(")) || source.contains(&format!("fn {name}<"))
}

/// The files of `src/` that make up the module `module` (`memory::store`,
/// `fixed_window/redis.rs`): its own file, and the files of its folder. A module named by
/// its last segments may match several (`memory`): any of them will do.
fn module_files(module: &str) -> Vec<PathBuf> {
    let module = module.trim_end_matches(".rs").replace("::", "/");
    let src = root().join("src");
    rust_files(&src)
        .into_iter()
        .filter(|path| {
            let relative = path
                .strip_prefix(&src)
                .expect("a file of src/")
                .with_extension("")
                .to_string_lossy()
                .replace('\\', "/");
            let as_module = relative.strip_suffix("/mod").unwrap_or(&relative);
            let slashed = format!("/{relative}");
            as_module == module
                || as_module.ends_with(&format!("/{module}"))
                || relative.starts_with(&format!("{module}/"))
                || slashed.contains(&format!("/{module}/"))
        })
        .collect()
}

/// The backticked spans of `text`, each with the text that follows it.
fn backticked(text: &str) -> Vec<(&str, &str)> {
    let mut spans = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        let after = &rest[start + 1..];
        let Some(len) = after.find('`') else { break };
        spans.push((&after[..len], &after[len + 1..]));
        rest = &after[len + 1..];
    }
    spans
}

/// A test function's name: a lowercase identifier with at least one underscore.
fn is_test_name(token: &str) -> bool {
    token.starts_with(|c: char| c.is_ascii_lowercase())
        && token.contains('_')
        && token
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Where the names of a cell are looked for.
enum Place {
    /// A file of `tests/`.
    File(PathBuf),
    /// A module of `src/`, by its files.
    Module(String, Vec<PathBuf>),
}

/// The rows of the maintainers' table: the table under "For maintainers" whose last column
/// is the test.
fn maintainers_rows(doc: &str) -> Vec<&str> {
    let section = doc
        .find("## For maintainers")
        .map(|start| &doc[start..])
        .expect("docs/failure-model.md has a \"For maintainers\" section");
    let mut lines = section
        .lines()
        .skip_while(|line| !(line.starts_with("| failure |") && line.contains("| test (")));
    assert!(
        lines.next().is_some(),
        "the maintainers' table has a header whose last column is the test"
    );
    lines
        .filter(|line| !line.starts_with("|---"))
        .take_while(|line| line.starts_with('|'))
        .collect()
}

/// The last cell of a table row.
fn last_cell(row: &str) -> &str {
    let row = row.trim_end();
    let row = row.strip_suffix('|').unwrap_or(row).trim_end();
    row.rsplit(" | ").next().unwrap_or(row).trim()
}

/// What is wrong with one row's test cell; how many tests and modules it names.
fn check_cell(cell: &str, holding_rules: &str, problems: &mut Vec<String>) -> usize {
    let mut place = Place::File(root().join("tests/failure_model.rs"));
    let mut named = 0;
    for (token, after) in backticked(cell) {
        if after.starts_with(" unit test") {
            let files = module_files(token);
            if files.is_empty() {
                problems.push(format!("no module `{token}` in src/ (named in: {cell})"));
            } else if after.starts_with(" unit tests")
                && !files.iter().any(|file| {
                    let source = read(file);
                    source.contains("#[test]") || source.contains("#[tokio::test")
                })
            {
                problems.push(format!(
                    "the module `{token}` has no unit tests (named in: {cell})"
                ));
            }
            named += 1;
            place = Place::Module(token.to_owned(), files);
        } else if token.ends_with(".rs") {
            let path = root().join("tests").join(token);
            if !path.is_file() {
                problems.push(format!("no file tests/{token} (named in: {cell})"));
            }
            place = Place::File(path);
        } else if let Some(rule) = token.strip_prefix("holding_rules::") {
            named += 1;
            if !defines(holding_rules, rule) {
                problems.push(format!(
                    "no rule `{rule}` in tests/support/holding.rs (named in: {cell})"
                ));
            }
        } else if is_test_name(token) {
            named += 1;
            match &place {
                Place::File(path) => {
                    if path.is_file() && !defines(&read(path), token) {
                        problems.push(format!(
                            "no test `{token}` in {} (named in: {cell})",
                            path.strip_prefix(root()).unwrap_or(path).display()
                        ));
                    }
                }
                Place::Module(module, files) => {
                    if !files.iter().any(|file| defines(&read(file), token)) {
                        problems.push(format!(
                            "no unit test `{token}` in the module `{module}` (named in: {cell})"
                        ));
                    }
                }
            }
        } else if token.contains(|c: char| c.is_ascii_lowercase() || c == '_') {
            // Not a command such as `FLUSHALL`: a test name mistyped, which would otherwise
            // be checked by nobody.
            problems.push(format!(
                "`{token}` is no file, module or test name (named in: {cell})"
            ));
        }
    }
    named
}

#[test]
fn every_test_the_failure_model_names_exists() {
    let doc = read(&root().join("docs/failure-model.md"));
    let holding_rules = read(&root().join("tests/support/holding.rs"));
    assert!(
        holding_rules.contains("mod holding_rules"),
        "tests/support/holding.rs defines the holding rules"
    );
    let rows = maintainers_rows(&doc);
    assert!(
        rows.len() >= FAILURE_TABLE_ROWS,
        "the maintainers' table has {} rows, fewer than the {FAILURE_TABLE_ROWS} it had",
        rows.len()
    );
    let mut problems = Vec::new();
    for row in &rows {
        let cell = last_cell(row);
        if check_cell(cell, &holding_rules, &mut problems) == 0 {
            problems.push(format!("a row names no test: {row}"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/failure-model.md names tests that do not exist:\n{}",
        problems.join("\n")
    );
}

/// The checker itself: a name that exists nowhere is caught, in each kind of place.
#[test]
fn a_test_that_does_not_exist_is_caught() {
    let holding_rules = read(&root().join("tests/support/holding.rs"));
    for cell in [
        "`no_such_test_anywhere`",
        "`No_such_test_anywhere`",
        "`fenced_lock.rs` `no_such_test_anywhere`",
        "`no_such_file.rs` `no_such_test_anywhere`",
        "`holding_rules::no_such_test_anywhere`",
        "`memory::store` unit test `no_such_test_anywhere`",
        "`no_such_module` unit tests",
    ] {
        let mut problems = Vec::new();
        check_cell(cell, &holding_rules, &mut problems);
        assert!(!problems.is_empty(), "not caught: {cell}");
    }
    let mut problems = Vec::new();
    let named = check_cell(
        "`a_stall_shorter_than_the_decision_timeout_gives_normal_answers`; `fenced_lock.rs` \
         `long_names_are_stored_as_their_digest`; `memory::store` unit tests",
        &holding_rules,
        &mut problems,
    );
    assert_eq!((named, problems), (3, Vec::<String>::new()));
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = read(&root().join("README.md"));
    let lines: Vec<&str> = readme.lines().collect();
    assert!(
        lines.len() <= README_MAX_LINES,
        "the README has {} lines, more than {README_MAX_LINES}: the manual (docs/) takes the rest",
        lines.len()
    );
    let mut in_code = false;
    for (number, line) in lines.iter().enumerate() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        assert!(
            in_code || line.chars().count() <= README_MAX_LINE_LEN,
            "README.md:{}: a line of {} characters, more than {README_MAX_LINE_LEN}",
            number + 1,
            line.chars().count()
        );
    }
    // `#49`, `issue 4`, `issues/49`: the project's own process stays out of the front door.
    let around = |text: &str, at: usize| text[at..].chars().take(16).collect::<String>();
    for (at, _) in readme.match_indices('#') {
        assert!(
            !readme[at + 1..].starts_with(|c: char| c.is_ascii_digit()),
            "README.md names an issue number: {}",
            around(&readme, at)
        );
    }
    let lower = readme.to_lowercase();
    for (at, _) in lower.match_indices("issue") {
        let rest = lower[at + "issue".len()..]
            .trim_start_matches('s')
            .trim_start_matches([' ', '#', '/']);
        assert!(
            !rest.starts_with(|c: char| c.is_ascii_digit()),
            "README.md names an issue number: {}",
            around(&lower, at)
        );
    }
}

#[test]
fn every_page_the_readme_links_exists() {
    let readme = read(&root().join("README.md"));
    let mut missing = Vec::new();
    for (at, _) in readme.match_indices("docs/") {
        let before = &readme[..at];
        // A relative link: `](docs/...)` or a reference definition `]: docs/...`.
        if !(before.ends_with("](") || before.ends_with("]: ")) {
            continue;
        }
        let link = &readme[at..];
        let end = link
            .find(|c: char| c == ')' || c == '#' || c.is_whitespace())
            .unwrap_or(link.len());
        let path = &link[..end];
        if !root().join(path).is_file() {
            missing.push(path.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "README.md links pages that do not exist: {missing:?}"
    );
}
