//! Remote globs as OpenSSH's `sftp` expands them: `*`, `?` and `[...]` (with `!` or `^`
//! to negate, ranges, and `\` to take the next byte as it is) in any component of a
//! path, matched against the names the server lists. A wildcard never matches a `/`,
//! nor a leading `.` unless the pattern's component starts with one.

use crate::client::{SftpClient, SftpError, join};

/// Whether `pattern` holds a wildcard (one not escaped by `\`).
pub(crate) fn has_wildcard(pattern: &[u8]) -> bool {
    let mut escaped = false;
    for &b in pattern {
        match (escaped, b) {
            (true, _) => escaped = false,
            (false, b'\\') => escaped = true,
            (false, b'*' | b'?' | b'[') => return true,
            _ => {}
        }
    }
    false
}

/// `pattern` with its escapes taken out (for a component without wildcards).
fn unescaped(pattern: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pattern.len());
    let mut bytes = pattern.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => out.extend(bytes.next()),
            _ => out.push(b),
        }
    }
    out
}

/// Whether the name `name` (one component, no `/`) matches `pattern`.
pub(crate) fn matches(pattern: &[u8], name: &[u8]) -> bool {
    if name.first() == Some(&b'.') && pattern.first() != Some(&b'.') {
        return false;
    }
    matches_from(pattern, name)
}

fn matches_from(pattern: &[u8], name: &[u8]) -> bool {
    // The classic loop: on a mismatch, go back to the last `*` and let it take one
    // byte more; no recursion, so no pattern costs more than pattern × name steps.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some(b'?') => {
                p += 1;
                n += 1;
                continue;
            }
            Some(b'[') => {
                if let Some((hit, next)) = class(&pattern[p..], name[n]) {
                    if hit {
                        p += next;
                        n += 1;
                        continue;
                    }
                } else if name[n] == b'[' {
                    // An unclosed `[` is itself.
                    p += 1;
                    n += 1;
                    continue;
                }
            }
            Some(b'\\') if pattern.get(p + 1) == Some(&name[n]) => {
                p += 2;
                n += 1;
                continue;
            }
            Some(&c) if c != b'\\' && c == name[n] => {
                p += 1;
                n += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, sn)) => {
                star = Some((sp, sn + 1));
                p = sp + 1;
                n = sn + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether `byte` is in the class at the start of `pattern` (which starts with `[`), and
/// the class's length; `None` if it is not closed.
fn class(pattern: &[u8], byte: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    loop {
        let mut c = *pattern.get(i)?;
        if c == b']' && !first {
            return Some((hit != negated, i + 1));
        }
        first = false;
        if c == b'\\' {
            i += 1;
            c = *pattern.get(i)?;
        }
        let is_range =
            pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&e| e != b']');
        if is_range {
            let end = pattern[i + 2];
            hit |= (c..=end).contains(&byte);
            i += 3;
        } else {
            hit |= c == byte;
            i += 1;
        }
    }
}

/// [`SftpClient::glob`]: lists each directory a wildcard part asks about, at most
/// `max_entries` entries each.
pub(crate) async fn glob(
    client: &SftpClient,
    pattern: &[u8],
    max_entries: usize,
) -> Result<Vec<Vec<u8>>, SftpError> {
    if !has_wildcard(pattern) {
        return Ok(vec![unescaped(pattern)]);
    }
    let absolute = pattern.first() == Some(&b'/');
    let parts: Vec<&[u8]> = pattern
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    let mut found: Vec<Vec<u8>> = vec![if absolute { b"/".to_vec() } else { Vec::new() }];
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let mut next = Vec::new();
        for at in &found {
            if !has_wildcard(part) {
                next.push(join(at, &unescaped(part)));
                continue;
            }
            let dir: &[u8] = if at.is_empty() { b"." } else { at };
            let Ok(entries) = client.read_dir_at_most(dir, max_entries).await else {
                continue;
            };
            for entry in entries {
                let own = entry.name == b"." || entry.name == b"..";
                let usable = !own && !entry.name.is_empty() && !entry.name.contains(&b'/');
                let leads_on = last || entry.attrs.is_dir() || entry.attrs.is_symlink();
                if usable && leads_on && matches(part, &entry.name) {
                    next.push(join(at, &entry.name));
                }
            }
        }
        found = next;
    }
    found.sort();
    found.dedup();
    if found.is_empty() {
        return Err(SftpError::Local {
            path: crate::printable_bytes(pattern),
            problem: "matches nothing on the server".into(),
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::{has_wildcard, matches};

    #[test]
    fn wildcards_match_as_fnmatch_does() {
        let yes: &[(&[u8], &[u8])] = &[
            (b"*", b"file"),
            (b"*.bin", b"a.bin"),
            (b"*.bin", b"x.y.bin"),
            (b"a?c", b"abc"),
            (b"[ab]x", b"bx"),
            (b"[a-c]x", b"cx"),
            (b"[!a-c]x", b"dx"),
            (b"[^a]x", b"bx"),
            (b"[]]x", b"]x"),
            (b"\\*x", b"*x"),
            (b"*a*b*c", b"xxaxxbxxc"),
            (b".*", b".hidden"),
            (b"[", b"["),
            (b"f\xff*", b"f\xff\xfe"),
        ];
        for (p, n) in yes {
            assert!(
                matches(p, n),
                "{:?} should match {:?}",
                p.escape_ascii(),
                n.escape_ascii()
            );
        }
        let no: &[(&[u8], &[u8])] = &[
            (b"*", b".hidden"),
            (b"?x", b".x"),
            (b"*.bin", b"a.bi"),
            (b"a?c", b"ac"),
            (b"[!a-c]x", b"bx"),
            (b"\\*x", b"ax"),
            (b"*a*b*c", b"xxaxxbxx"),
            (&[b'*', b'a'].repeat(200), &[b'a'; 199]),
        ];
        for (p, n) in no {
            assert!(
                !matches(p, n),
                "{:?} should not match {:?}",
                p.escape_ascii(),
                n.escape_ascii()
            );
        }
        assert!(has_wildcard(b"dir/*.bin") && has_wildcard(b"a[1]"));
        assert!(!has_wildcard(b"plain/name") && !has_wildcard(b"esc\\*aped"));
    }
}
