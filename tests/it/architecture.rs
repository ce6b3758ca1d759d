//! docs/architecture.md against the code: its floors (a module of `src/` uses only the floors
//! below its own) and its promise that no folder of `src/` has an import circle among its files.
//! A `use` that contradicts either fails here, naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::util::repo;

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// A file's code as the build without tests sees it: no comments, no `#[cfg(test)]` module
/// (which the house keeps at a file's end), and no test-only file.
fn code(path: &Path) -> Option<String> {
    let name = path.file_name().unwrap().to_string_lossy();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return None;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.find("#[cfg(test)]\nmod ").map_or(text.as_str(), |i| &text[..i]);
    Some(text.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n"))
}

/// The first names after each `prefix` in `code`: `prefix name` and `prefix {a, b::c}`.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in code.match_indices(prefix) {
        if code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(group.split(',').map(|p| ident(p.trim())).filter(|n| !n.is_empty()));
        } else {
            names.insert(ident(rest));
        }
    }
    names.remove("");
    names
}

/// docs/architecture.md's floors, lowest first: the numbered list after "Floors, lowest first".
fn floors() -> BTreeMap<String, usize> {
    let page = std::fs::read_to_string(repo("docs/architecture.md")).unwrap();
    let list = page.split("Floors, lowest first").nth(1).expect("docs/architecture.md lists its floors");
    let mut floors = BTreeMap::new();
    for (floor, line) in list.lines().skip_while(|l| !l.starts_with("1. ")).take_while(|l| !l.trim().is_empty()).enumerate() {
        for module in line.split('`').skip(1).step_by(2) {
            floors.insert(module.trim_end_matches('/').to_string(), floor);
        }
    }
    assert!(floors.len() > 5, "docs/architecture.md's floors: {floors:?}");
    floors
}

/// Every module of `src/` uses only floors below its own, as docs/architecture.md draws them.
#[test]
fn every_module_uses_only_the_floors_below_its_own() {
    let floors = floors();
    let src = repo("src");
    let mut wrong = Vec::new();
    for path in rust_files(&src) {
        let rel = path.strip_prefix(&src).unwrap();
        let module = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if rel.components().count() == 1 && !floors.contains_key(&module) {
            continue; // lib.rs, main.rs, launcher.rs and the test helpers
        }
        let Some(&floor) = floors.get(&module) else {
            wrong.push(format!("src/{module} is on no floor of docs/architecture.md"));
            continue;
        };
        let Some(code) = code(&path) else { continue };
        let used = names_after(&code, "crate::").into_iter().chain(names_after(&code, "tchseq::"));
        for other in used.filter(|o| *o != module) {
            match floors.get(&other) {
                Some(&f) if f < floor => {}
                Some(_) => wrong.push(format!("src/{} uses {other}, which is not below {module}", rel.display())),
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "imports that contradict docs/architecture.md:\n{}", wrong.join("\n"));
}

/// No folder of `src/` has an import circle among its files (`mod.rs`, the folder's face, aside).
#[test]
fn no_folder_has_an_import_circle() {
    let src = repo("src");
    let mut rooms: BTreeMap<PathBuf, BTreeMap<String, String>> = BTreeMap::new();
    for path in rust_files(&src) {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name == "mod" {
            continue;
        }
        if let Some(code) = code(&path) {
            rooms.entry(path.parent().unwrap().to_path_buf()).or_default().insert(name, code);
        }
    }
    let mut circles = Vec::new();
    for (room, files) in &rooms {
        let rel = room.strip_prefix(&src).unwrap();
        let crate_path = format!("crate::{}::", rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("::"));
        let uses: BTreeMap<&str, BTreeSet<String>> = files
            .iter()
            .map(|(name, code)| {
                let mut used = names_after(code, "super::");
                if !rel.as_os_str().is_empty() {
                    used.extend(names_after(code, &crate_path));
                }
                used.retain(|u| u != name && files.contains_key(u));
                (name.as_str(), used)
            })
            .collect();
        if let Some(circle) = find_circle(&uses) {
            circles.push(format!("src/{}: {}", rel.display(), circle.join(" → ")));
        }
    }
    assert!(circles.is_empty(), "import circles:\n{}", circles.join("\n"));
}

/// A circle in `uses` (file → the files it uses), as the files along it.
fn find_circle(uses: &BTreeMap<&str, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(node: &str, uses: &BTreeMap<&str, BTreeSet<String>>, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut circle = path[i..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in uses.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, uses, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    uses.keys().find_map(|n| visit(n, uses, &mut Vec::new(), &mut done))
}

#[test]
fn the_circle_finder_finds_a_circle_and_only_one() {
    let graph = |edges: &[(&'static str, &'static str)]| {
        let mut g: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a).or_default().insert(b.to_string());
            g.entry(b).or_default();
        }
        g
    };
    assert_eq!(find_circle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    assert_eq!(find_circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    assert_eq!(names_after("use super::{gemm::X, isa};\nlet y = super::pack::f();", "super::"), ["gemm", "isa", "pack"].map(String::from).into());
}
