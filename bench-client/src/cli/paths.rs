//! No output overwrites an input: every file a command writes (`--plot`, `--html`, `--out`) is
//! compared, by canonical path, with every file it reads or keeps (results files and the manifests
//! beside them) and with the other outputs, before anything runs.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::results::manifest_path;

/// A file a command reads or keeps, named for the error message.
pub(super) struct Kept<'a> {
    pub(super) what: &'static str,
    pub(super) path: &'a Path,
}

/// A file a command writes, named by its flag.
pub(super) struct Written<'a> {
    pub(super) flag: &'static str,
    pub(super) path: &'a Path,
}

/// `path` made absolute with its links resolved: the file itself when it exists, else its folder
/// (when that exists) joined with its name, else as given, made absolute.
fn canonical(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map_or_else(|_| abs.clone(), |d| d.join(name)),
        _ => abs,
    }
}

/// Refuses `written` outputs in the folder of `out` whose name `is_kept` says a run's own file
/// has (a capacity search's steps, however many it runs).
pub(super) fn refuse_overwriting_named(
    out: &Path,
    written: &[Written<'_>],
    what: &str,
    is_kept: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    let folder = |p: &Path| canonical(p).parent().map(Path::to_path_buf);
    for w in written {
        let name = canonical(w.path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        if folder(w.path) == folder(out) && name.is_some_and(|n| is_kept(&n)) {
            anyhow::bail!(
                "{} {} would overwrite {what}: give another path",
                w.flag,
                w.path.display()
            );
        }
    }
    Ok(())
}

/// The results files `files`, each with the manifest beside it, as kept files.
pub(super) fn results_and_manifests<'a>(
    what: &'static str,
    files: impl IntoIterator<Item = &'a PathBuf>,
) -> Vec<(&'static str, PathBuf)> {
    files
        .into_iter()
        .flat_map(|f| {
            [
                (what, f.clone()),
                ("the manifest beside a results file", manifest_path(f)),
            ]
        })
        .collect()
}

/// Refuses (with a message naming both) any output that is one of `kept` or another output.
pub(super) fn refuse_overwrites(
    kept: &[(&'static str, PathBuf)],
    written: &[Written<'_>],
) -> anyhow::Result<()> {
    let kept: Vec<(Kept<'_>, PathBuf)> = kept
        .iter()
        .map(|(what, p)| (Kept { what, path: p }, canonical(p)))
        .collect();
    for (i, w) in written.iter().enumerate() {
        let c = canonical(w.path);
        if let Some((k, _)) = kept.iter().find(|(_, kc)| *kc == c) {
            anyhow::bail!(
                "{} {} would overwrite {} {}: give another path",
                w.flag,
                w.path.display(),
                k.what,
                k.path.display()
            );
        }
        if let Some(o) = written[..i].iter().find(|o| canonical(o.path) == c) {
            anyhow::bail!(
                "{} and {} both name {}: give each its own path",
                o.flag,
                w.flag,
                w.path.display()
            );
        }
    }
    Ok(())
}

/// The outputs of a flag pair, leaving out those not given.
pub(super) fn written<'a>(outs: &[(&'static str, Option<&'a PathBuf>)]) -> Vec<Written<'a>> {
    outs.iter()
        .filter_map(|(flag, p)| p.map(|p| Written { flag, path: p }))
        .collect()
}

/// [`check_writable`] of each output given.
pub(super) fn check_all_writable(outs: &[Written]) -> anyhow::Result<()> {
    outs.iter().try_for_each(|w| check_writable(w.flag, w.path))
}

/// Refuses an output path no file can be written to, before any work: an existing folder, device
/// or other file that is not a regular one (a link is followed), a folder that cannot be made, or
/// one in which no file can be made (tried with an empty file, removed at once).
pub(super) fn check_writable(flag: &str, path: &Path) -> anyhow::Result<()> {
    if let Some(what) = crate::results::not_a_file(path) {
        anyhow::bail!("{flag} {}: {what}, not a file to write", path.display());
    }
    if let Some(why) = crate::results::not_in_a_folder(path) {
        anyhow::bail!("{flag} {}: {why}", path.display());
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!("{flag} {}: cannot make its folder: {e}", path.display())
        })?;
    }
    let name = path
        .file_name()
        .map_or("out".into(), |n| n.to_string_lossy());
    let probe = dir
        .unwrap_or(Path::new("."))
        .join(format!(".{name}.{}.probe", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| {
            anyhow::anyhow!("{flag} {}: cannot write in its folder: {e}", path.display())
        })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `text` to `path` through a temporary file beside it, renamed into place once whole; the
/// temporary file is removed when that fails. A link is written through (the file it names is
/// replaced), and a path that is not a regular file is refused ([`check_writable`]).
pub(super) fn write_whole(path: &Path, text: &str) -> anyhow::Result<()> {
    write_whole_with(path, |w| Ok(w.write_all(text.as_bytes())?))
}

/// [`write_whole`] of what `fill` writes, through a buffer: an output larger than memory is never
/// held whole; `fill`'s error leaves `path` as it was.
pub(super) fn write_whole_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    check_writable("writing", path)?;
    let target = if path.is_symlink() {
        path.canonicalize()
            .with_context(|| format!("following the link {}", path.display()))?
    } else {
        path.to_path_buf()
    };
    let tmp = PathBuf::from(format!("{}.tmp", target.display()));
    let written = std::fs::File::create(&tmp)
        .map_err(anyhow::Error::from)
        .and_then(|f| {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            fill(&mut w)?;
            let f = w
                .into_inner()
                .map_err(std::io::IntoInnerError::into_error)?;
            Ok(f.sync_all()?)
        })
        .with_context(|| format!("writing {}", tmp.display()))
        .and_then(|()| {
            std::fs::rename(&tmp, &target)
                .with_context(|| format!("renaming {} into place", tmp.display()))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_is_written_whole_through_a_link_and_never_over_a_folder_or_device() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.toml");
        std::fs::write(&real, "old").unwrap();
        #[cfg(unix)]
        {
            let link = dir.path().join("link.toml");
            std::os::unix::fs::symlink(&real, &link).unwrap();
            write_whole(&link, "new").unwrap();
            assert!(link.is_symlink());
            assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
            let e = check_writable("--out", Path::new("/dev/null")).unwrap_err();
            assert!(e.to_string().contains("not a file to write"), "{e}");
        }
        let e = write_whole(dir.path(), "x").unwrap_err();
        assert!(e.to_string().contains("a folder"), "{e}");
        // Under a file no folder can be made: said before anything is written.
        let under = real.join("deeper/p.svg");
        let e = check_writable("--plot", &under).unwrap_err();
        let want = format!(
            "--plot {}: {} is a file, not a folder",
            under.display(),
            real.display()
        );
        assert_eq!(e.to_string(), want);
        let nested = dir.path().join("a/b/p.toml");
        write_whole(&nested, "p").unwrap();
        assert_eq!(std::fs::read_to_string(&nested).unwrap(), "p");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            !names.iter().any(|n| n.to_string_lossy().ends_with(".tmp")),
            "{names:?}"
        );
    }

    #[test]
    fn an_output_written_in_pieces_that_fails_midway_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        std::fs::write(&out, "old\n").unwrap();
        let e = write_whole_with(&out, |w| {
            // More than the buffer holds, so that some of it reached the temporary file.
            for _ in 0..3000 {
                w.write_all(&[b'x'; 1000])?;
            }
            anyhow::bail!("the source ran dry")
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("the source ran dry"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old\n");
        assert!(!dir.path().join("out.jsonl.tmp").exists());
        write_whole_with(&out, |w| Ok(w.write_all(b"new\n")?)).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new\n");
    }

    #[test]
    fn an_output_naming_an_input_or_its_manifest_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let res = dir.path().join("r.jsonl");
        std::fs::write(&res, "{}\n").unwrap();
        let kept = results_and_manifests("the results file", [&res]);
        // Another spelling of the same file.
        let other = dir.path().join(".").join("r.jsonl");
        let e = refuse_overwrites(&kept, &written(&[("--html", Some(&other))])).unwrap_err();
        assert!(e.to_string().contains("--html"), "{e}");
        let m = dir.path().join("r.jsonl.manifest.jsonl");
        assert!(refuse_overwrites(&kept, &written(&[("--plot", Some(&m))])).is_err());
        let fine = dir.path().join("plot.svg");
        let twice = written(&[("--plot", Some(&fine)), ("--html", Some(&fine))]);
        assert!(refuse_overwrites(&kept, &twice).is_err());
        assert!(refuse_overwrites(&kept, &written(&[("--plot", Some(&fine))])).is_ok());
    }
}
