//! README.md's "Which piece for which job" table is also the crate root's (src/lib.rs), where
//! its "use" column links to the items: the two must not drift apart. Every other column is
//! compared cell by cell, with the rustdoc's link brackets taken out.

/// The table's rows after the heading `heading`, each a list of cells, in `text` whose lines
/// start with `prefix` (`""` in README.md, `"//! "` in src/lib.rs).
fn table(text: &str, prefix: &str, heading: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.strip_prefix(prefix).unwrap_or(l))
        .skip_while(|l| l.trim_start_matches('#').trim() != heading)
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    lines
        .iter()
        .skip(2) // the header and the |---| line
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| unlink(c.trim()))
                .collect()
        })
        .collect()
}

/// `cell` without rustdoc's link syntax: `[text][label]` and `[text]` become `text`.
fn unlink(cell: &str) -> String {
    let mut out = String::new();
    let mut rest = cell;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find(']').map(|c| open + c) else {
            break;
        };
        out.push_str(&rest[open + 1..close]);
        rest = &rest[close + 1..];
        if rest.starts_with('[') {
            rest = rest.find(']').map_or(rest, |c| &rest[c + 1..]);
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn crate_root_has_the_readme_table() {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |p: &str| std::fs::read_to_string(format!("{root}/{p}")).unwrap();
    let heading = "Which piece for which job";
    let readme = table(&read("README.md"), "", heading);
    let lib = table(&read("src/lib.rs"), "//! ", heading);
    assert!(readme.len() > 10, "README's table not found: {readme:?}");
    assert_eq!(
        readme.len(),
        lib.len(),
        "rows: README {readme:?}, lib.rs {lib:?}"
    );
    for (r, l) in readme.iter().zip(&lib) {
        assert_eq!(r.len(), 4, "{r:?}");
        assert_eq!(l.len(), 4, "{l:?}");
        for col in [0, 2, 3] {
            assert_eq!(r[col], l[col], "README row {r:?}, lib.rs row {l:?}");
        }
    }
}

#[test]
fn unlink_takes_out_link_brackets_only() {
    assert_eq!(unlink("[`Mutex`]"), "`Mutex`");
    assert_eq!(
        unlink("[`shm::ShmMutex`][ShmMutex] (x)"),
        "`shm::ShmMutex` (x)"
    );
    assert_eq!(
        unlink("all ([`ShmAcceptMutex`]: Linux)"),
        "all (`ShmAcceptMutex`: Linux)"
    );
    assert_eq!(
        unlink("— (`lock_api` for the traits)"),
        "— (`lock_api` for the traits)"
    );
}
