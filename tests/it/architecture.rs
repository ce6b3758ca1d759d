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

/// The names a file declares at its top level (`pub struct X`, `pub fn f`, `pub mod m`, ...),
/// which a re-export lets other code name without the file's path.
fn declared(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut names = BTreeSet::new();
    for rest in code.lines().filter_map(|l| l.strip_prefix("pub ")) {
        for keyword in ["struct ", "enum ", "fn ", "type ", "trait ", "const ", "static ", "mod "] {
            if let Some(name) = rest.strip_prefix(keyword) {
                names.insert(ident(name));
            }
        }
    }
    names.remove("");
    names
}

/// No folder of `src/` has an import circle among its rooms: its files (`mod.rs`, the folder's
/// face, aside) and its sub-folders, each taken whole. A use counts by the path it names
/// (`super::file`, `crate::folder::sub::`) or by a name that one room alone declares and a
/// re-export makes reachable (`crate::hub::HubError`).
#[test]
fn no_folder_has_an_import_circle() {
    let src = repo("src");
    let mut rooms: BTreeMap<PathBuf, BTreeMap<String, (bool, String)>> = BTreeMap::new();
    for path in rust_files(&src) {
        let Some(code) = code(&path) else { continue };
        let rel = path.strip_prefix(&src).unwrap();
        let parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        // the file is a room of its own folder, and part of a sub-folder's room in each folder above
        for depth in 1..parts.len() {
            let folder = src.join(parts[..depth].join("/"));
            let room = rooms.entry(folder).or_default().entry(parts[depth].trim_end_matches(".rs").to_string()).or_default();
            room.0 = depth + 1 < parts.len();
            room.1.push_str(&code);
            room.1.push('\n');
        }
        if parts.len() == 1 {
            continue;
        }
        if parts.last().unwrap() == "mod.rs" {
            // a folder's face belongs to the folder's room above, not to the folder itself
            let folder = src.join(parts[..parts.len() - 1].join("/"));
            if let Some(room) = rooms.get_mut(&folder) {
                room.remove("mod");
            }
        }
    }
    let mut circles = Vec::new();
    for (folder, inside) in &rooms {
        let rel = folder.strip_prefix(&src).unwrap();
        let crate_path = format!("crate::{}::", rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("::"));
        let declared_by: BTreeMap<&str, BTreeSet<String>> = inside.iter().map(|(name, (_, code))| (name.as_str(), declared(code))).collect();
        let owner = |used: &str| -> Option<&str> {
            let mut owners = declared_by.iter().filter(|(_, names)| names.contains(used)).map(|(room, _)| *room);
            let first = owners.next()?;
            owners.next().is_none().then_some(first)
        };
        let uses: BTreeMap<&str, BTreeSet<String>> = inside
            .iter()
            .map(|(name, (is_folder, code))| {
                let mut named = names_after(code, &crate_path);
                if !is_folder {
                    named.extend(names_after(code, "super::"));
                }
                let mut used: BTreeSet<String> = named
                    .iter()
                    .filter_map(|u| if inside.contains_key(u) { Some(u.clone()) } else { owner(u).map(String::from) })
                    .collect();
                used.remove(name);
                (name.as_str(), used)
            })
            .collect();
        if let Some(circle) = find_circle(&uses) {
            circles.push(format!("src/{}: {}", rel.display(), circle.join(" → ")));
        }
    }
    assert!(circles.is_empty(), "import circles:\n{}", circles.join("\n"));
}

/// The hub's runtime uses its loader, and the loader never the runtime (docs/architecture.md).
#[test]
fn the_hub_loader_knows_nothing_of_its_runtime() {
    let src = repo("src/hub");
    let runtime: BTreeSet<String> = rust_files(&src.join("run")).iter().filter_map(|p| code(p)).flat_map(|c| declared(&c)).collect();
    assert!(runtime.contains("Translator") && runtime.contains("LanguageModel"), "{runtime:?}");
    let mut wrong = Vec::new();
    for path in rust_files(&src.join("load")) {
        let Some(code) = code(&path) else { continue };
        let used = names_after(&code, "crate::hub::").into_iter().chain(names_after(&code, "super::super::"));
        for name in used.filter(|n| n == "run" || runtime.contains(n)) {
            wrong.push(format!("{} uses {name}", path.strip_prefix(&src).unwrap().display()));
        }
    }
    assert!(wrong.is_empty(), "the loader uses the runtime:\n{}", wrong.join("\n"));
    let loader_used = rust_files(&src.join("run")).iter().filter_map(|p| code(p)).any(|c| names_after(&c, "crate::hub::").contains("HubError"));
    assert!(loader_used, "the runtime names the loader's error as crate::hub::HubError");
}

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
