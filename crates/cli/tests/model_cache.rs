//! `folio pull`, `folio list` and `folio rm` against a temporary `$FOLIO_HOME` (the real
//! cache is only read: its model file is copied in); nothing here touches the network.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

fn folio(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_folio"))
        .env("FOLIO_HOME", home)
        .args(args)
        .output()
        .expect("run folio")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn err(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("folio-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn age(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs))
        .unwrap();
}

#[test]
fn list_and_rm_work_on_the_cache_of_folio_home() {
    let home = scratch("list-rm");
    assert_eq!(ok(&folio(&home, &["list"])), "NAME  SIZE  MODIFIED\n");
    let models = home.join("models");
    std::fs::create_dir_all(&models).unwrap();
    let mine = models.join("my-model.gguf");
    std::fs::write(&mine, vec![0u8; 3 << 20]).unwrap();
    age(&mine, 3 * 86400);
    let smol = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::fs::write(&smol, b"not really").unwrap();
    std::fs::write(
        models.join("SmolLM2-135M-Instruct.Q4_1.gguf.sha256-ok"),
        b"x",
    )
    .unwrap();
    age(&smol, 2 * 3600);
    std::fs::write(models.join(".x.gguf.part9"), b"partial").unwrap();
    assert_eq!(
        ok(&folio(&home, &["list"])),
        "NAME          SIZE     MODIFIED\n\
         my-model      3.0 MiB  3 days ago\n\
         smollm2-135m  10 B     2 hours ago\n"
    );

    assert_eq!(
        ok(&folio(&home, &["rm", "smollm2-135m"])),
        format!("deleted 'smollm2-135m' ({})\n", smol.display())
    );
    assert!(!smol.exists());
    assert!(!models
        .join("SmolLM2-135M-Instruct.Q4_1.gguf.sha256-ok")
        .exists());
    let e = err(&folio(&home, &["rm", "smollm2-135m"]));
    assert!(
        e.contains(&format!(
            "model \"smollm2-135m\" is not in the cache {} (it holds: my-model; `folio list` shows it)",
            models.display()
        )),
        "{e}"
    );
    // A file name works as well as the listed name.
    ok(&folio(&home, &["rm", "my-model.gguf"]));
    assert_eq!(ok(&folio(&home, &["list"])), "NAME  SIZE  MODIFIED\n");
    assert!(
        models.join(".x.gguf.part9").exists(),
        "hidden files are not models"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn pull_checks_a_file_already_there_and_refuses_malformed_names() {
    let home = scratch("pull");
    let e = err(&folio(&home, &["pull", "hf:Qwen"]));
    assert!(
        e.contains("\"hf:Qwen\": a Hugging Face Hub name is hf:ORG/REPO or hf:ORG/REPO:QUANT"),
        "{e}"
    );
    let e = err(&folio(&home, &["pull", "llama3"]));
    assert!(
        e.contains("\"llama3\" is not a catalogue model; the catalogue has: smollm2-135m"),
        "{e}"
    );

    let entry = folio_fetch::catalog::default_entry();
    let real = folio_fetch::model_path(entry);
    if folio_fetch::state(entry) == folio_fetch::State::Missing {
        eprintln!(
            "SKIPPED the pull of a present file: {} is absent",
            real.display()
        );
        return;
    }
    let models = home.join("models");
    std::fs::create_dir_all(&models).unwrap();
    let copy = models.join(entry.file_name);
    std::fs::copy(&real, &copy).unwrap();
    // The right size: pull verifies the hash and downloads nothing.
    assert_eq!(
        ok(&folio(&home, &["pull", "smollm2-135m"])),
        format!("success: smollm2-135m at {} (93.8 MiB)\n", copy.display())
    );
    assert_eq!(
        std::fs::read_to_string(models.join(format!("{}.sha256-ok", entry.file_name))).unwrap(),
        entry.sha256
    );
    ok(&folio(&home, &["rm", "smollm2-135m"]));
    assert!(!copy.exists());
    assert!(real.exists(), "the real cache is untouched");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn pull_of_a_hub_name_uses_the_hugging_face_cache_offline() {
    let home = scratch("hub");
    let hf = home.join("hf");
    let repo = hf.join("hub").join("models--org--tiny-GGUF");
    let snap = repo.join("snapshots").join("c0ffee");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join("main"), "c0ffee").unwrap();
    std::fs::write(snap.join("tiny-Q4_K_M.gguf"), b"GGUF").unwrap();
    let run = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_folio"))
            .env("FOLIO_HOME", &home)
            .env("HF_HOME", &hf)
            .env_remove("HF_HUB_CACHE")
            .env("HF_HUB_OFFLINE", "1")
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .args(["pull", name])
            .output()
            .expect("run folio")
    };
    let out = ok(&run("hf:org/tiny-GGUF"));
    assert_eq!(
        out.trim(),
        format!(
            "success: hf:org/tiny-GGUF at {} (4 B)",
            snap.join("tiny-Q4_K_M.gguf").display()
        )
    );
    let e = err(&run("hf:org/absent-GGUF"));
    assert!(
        e.contains(
            "HF_HUB_OFFLINE is set, and no GGUF of org/absent-GGUF is in the Hugging Face cache"
        ),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&home);
}
