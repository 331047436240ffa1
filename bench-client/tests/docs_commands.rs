//! Every `bench-client ...` and `mock-server ...` command in README.md, BENCHMARKS.md and docs/*.md parses as
//! pasted: the command lines of the shell blocks (```sh, ```bash, ```shell) are read the way a
//! shell reads them and handed to the binaries' own clap types, so a flag that no longer exists
//! fails here, naming the file and line.
//!
//! How a block is read:
//! - a line ending in `\` continues on the next; `#` starts a comment; a here-document's body is
//!   not shell and is skipped;
//! - a line is cut into commands at `&&`, `||`, `;` and `|`, and a command ends at a redirection;
//!   leading `NAME=value` words are environment, not the command;
//! - `$NAME` and `${NAME}` take the value a line `NAME=value` of the same block gave them, and
//!   otherwise (a computed value, a loop variable) the stand-in `1`;
//! - a command that holds a placeholder, `<` right before a letter as in `<FLAGS>`, is skipped:
//!   the reader fills it in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::Parser;

/// One command found in a document.
#[derive(Debug)]
struct DocCommand {
    file: PathBuf,
    line: usize,
    words: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the workspace")
        .to_path_buf()
}

/// README.md, BENCHMARKS.md and every docs/*.md, in a fixed order.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a readable entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("BENCHMARKS.md"));
    docs.insert(0, root.join("README.md"));
    docs
}

/// The logical lines (continuations joined) of the shell blocks, with the number of each one's
/// first line, one list per block.
fn shell_blocks(text: &str) -> Vec<Vec<(usize, String)>> {
    let mut blocks = Vec::new();
    // Inside a fence: `Some(lines)` for a shell block, `None` in another language's block.
    let mut fence: Option<Option<Vec<(usize, String)>>> = None;
    let mut pending: Option<(usize, String)> = None;
    let mut heredoc_end: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = raw.trim();
        if let Some(lang) = trimmed.strip_prefix("```") {
            match fence.take() {
                Some(block) => blocks.extend(block),
                None => {
                    let shell = matches!(lang.trim(), "sh" | "bash" | "shell");
                    fence = Some(shell.then(Vec::new));
                }
            }
            pending = None;
            heredoc_end = None;
            continue;
        }
        let Some(Some(block)) = fence.as_mut() else {
            continue;
        };
        if let Some(end) = &heredoc_end {
            if trimmed == end {
                heredoc_end = None;
            }
            continue;
        }
        let (start, mut line) = pending.take().unwrap_or((n, String::new()));
        line.push_str(raw);
        if let Some(body) = line.strip_suffix('\\') {
            pending = Some((start, format!("{body} ")));
            continue;
        }
        if let Some(pos) = line.find("<<") {
            let word = line[pos + 2..]
                .trim_start_matches('-')
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_matches(|c| c == '\'' || c == '"');
            if !word.is_empty() {
                heredoc_end = Some(word.to_string());
            }
        }
        block.push((start, line));
    }
    blocks
}

/// `$NAME` and `${NAME}` replaced from `vars`, else by the stand-in `1`.
fn expand(word: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, tail) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], &inner[end + 1..]),
                None => (inner, ""),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        out.push_str(vars.get(name).map_or("1", String::as_str));
        rest = tail;
    }
    out.push_str(rest);
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn has_placeholder(text: &str) -> bool {
    text.as_bytes()
        .windows(2)
        .any(|w| w[0] == b'<' && w[1].is_ascii_alphabetic())
}

/// Every command of `programs` in one document; unparseable shell (an unbalanced quote) is an
/// error naming the line.
fn commands(file: &Path, programs: &[&str]) -> Result<(Vec<DocCommand>, usize), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut found = Vec::new();
    let mut skipped = 0;
    for block in shell_blocks(&text) {
        let mut vars: HashMap<String, String> = HashMap::new();
        for (n, line) in block {
            let words = shlex::split(&line)
                .ok_or_else(|| format!("{}:{n}: not a shell line: {line}", file.display()))?;
            // A line that only assigns: remember literal values for the commands after it.
            if words.len() == 1 && is_assignment(&words[0]) {
                let (name, value) = words[0].split_once('=').unwrap_or_default();
                if !value.contains('$') {
                    vars.insert(name.to_string(), value.to_string());
                }
                continue;
            }
            for segment in words.split(|w| matches!(w.as_str(), "&&" | "||" | ";" | "|")) {
                let words: Vec<&String> = segment.iter().skip_while(|w| is_assignment(w)).collect();
                let Some(first) = words.first() else {
                    continue;
                };
                if !programs.contains(&first.as_str()) {
                    continue;
                }
                if words.iter().any(|w| has_placeholder(w)) {
                    skipped += 1;
                    continue;
                }
                let command: Vec<&String> = words
                    .into_iter()
                    .take_while(|w| {
                        !(w.starts_with('>')
                            || w.starts_with('<')
                            || w.starts_with("2>")
                            || w.starts_with("&>"))
                    })
                    .collect();
                found.push(DocCommand {
                    file: file.to_path_buf(),
                    line: n,
                    words: command.iter().map(|w| expand(w, &vars)).collect(),
                });
            }
        }
    }
    Ok((found, skipped))
}

/// clap's verdict on one command line: `Ok` also for `--help` and `--version`.
fn parses(c: &DocCommand) -> Result<(), String> {
    let verdict = match c.words[0].as_str() {
        "bench-client" => bench_client::cli::Cli::try_parse_from(&c.words).map(drop),
        "mock-server" => mock_server::cli::Args::try_parse_from(&c.words).map(drop),
        other => unreachable!("not a program this test reads: {other}"),
    };
    match verdict {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(format!(
            "{}:{}: `{}`\n{}",
            c.file.display(),
            c.line,
            c.words.join(" "),
            e.render()
        )),
    }
}

#[test]
fn every_documented_command_parses() {
    let mut all = Vec::new();
    let mut skipped = 0;
    for doc in documents() {
        let (found, s) = commands(&doc, &["bench-client", "mock-server"]).unwrap();
        all.extend(found);
        skipped += s;
    }
    let failures: Vec<String> = all.iter().filter_map(|c| parses(c).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} documented commands do not parse:\n\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
    // The docs show every subcommand at least once; a reader that found none read nothing.
    for sub in [
        "sweep",
        "load",
        "report",
        "merge",
        "compare",
        "import",
        "capacity",
        "calibrate",
        "predict",
    ] {
        assert!(
            all.iter()
                .any(|c| c.words[0] == "bench-client" && c.words.get(1).is_some_and(|w| w == sub)),
            "no documented `bench-client {sub}` command was found ({} commands read)",
            all.len()
        );
    }
    assert!(
        all.iter().any(|c| c.words[0] == "mock-server"),
        "no documented `mock-server` command was found"
    );
    eprintln!(
        "{} documented commands parse; {skipped} with placeholders skipped",
        all.len()
    );
}

#[test]
fn the_reader_follows_the_shell() {
    let doc = "text\n```sh\nU=http://h:1\nbench-client sweep --url $U \\\n    --runs 2   # note\n\
               START=$(( $(date +%s) * 1000 ))\nbench-client load --start-at ${START} > out.txt && bench-client report a.jsonl\n\
               cat <<YAML\nbench-client nothing --here\nYAML\nbench-client load <FLAGS> --resume\n```\n\
               ```text\nbench-client not --shell\n```\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.md");
    std::fs::write(&path, doc).unwrap();
    let (found, skipped) = commands(&path, &["bench-client"]).unwrap();
    let words: Vec<Vec<String>> = found.iter().map(|c| c.words.clone()).collect();
    let expect = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    assert_eq!(
        words,
        vec![
            expect("bench-client sweep --url http://h:1 --runs 2"),
            expect("bench-client load --start-at 1"),
            expect("bench-client report a.jsonl"),
        ]
    );
    assert_eq!(found[0].line, 4);
    assert_eq!(skipped, 1);
    // An unknown flag is refused by the client's own parser.
    let bad = DocCommand {
        file: path,
        line: 1,
        words: expect("bench-client sweep --no-such-flag"),
    };
    assert!(parses(&bad).unwrap_err().contains("--no-such-flag"));
}
