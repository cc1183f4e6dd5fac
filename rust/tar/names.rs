//! Energon's naming rules, reproduced exactly (megatron-energon 7.4.1,
//! `flavors/webdataset/config.py`):
//! `split_name_re = ^((?:.*/|)[^.]+)[.]([^/]*)$` and `skip_meta_re = __[^/]*__($|/)` (matched from
//! the start of the name).

use crate::error::{Error, Result};

/// Splits a member name into (sample key, part name) as `split_name_re` does, or `None` when the
/// name does not match (Energon then ignores the member).
///
/// The key is everything before the first dot of the last path component. When that component
/// starts with a dot, the regex lets the key end with the parent folder's slash, which only works
/// if that folder's name has no dot.
#[must_use]
pub fn split_name(name: &str) -> Option<(&str, &str)> {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    let dot = base_start + name[base_start..].find('.')?;
    if dot == base_start {
        if base_start == 0 {
            return None;
        }
        let parent = &name[..base_start - 1];
        let parent_start = parent.rfind('/').map_or(0, |i| i + 1);
        if parent[parent_start..].contains('.') {
            return None;
        }
    }
    Some((&name[..dot], &name[dot + 1..]))
}

/// True for members Energon skips as metadata: the first path component is `__…__`.
#[must_use]
pub fn is_meta(name: &str) -> bool {
    let first = name.split('/').next().unwrap_or("");
    first.len() >= 4 && first.starts_with("__") && first.ends_with("__")
}

/// True when a member name could escape the folder it is extracted into.
#[must_use]
pub fn escapes(name: &str) -> bool {
    name.starts_with('/') || name.split('/').any(|c| c == "..")
}

/// Checks a key we are about to write (docs/FORMAT.md §2).
///
/// # Errors
///
/// `Error::InvalidName` with the reason the key is refused.
pub fn check_key(key: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidName(format!(
            "invalid sample key {key:?}: {why}"
        )))
    };
    if key.is_empty() {
        return bad("it is empty");
    }
    if key.contains('.') || key.contains('/') {
        return bad("a key may contain no '.' or '/' (the first dot starts the part name)");
    }
    if key.starts_with("__") {
        return bad("keys starting with '__' are skipped by Energon as metadata");
    }
    if key.chars().any(char::is_control) {
        return bad("it contains a control character");
    }
    Ok(())
}

/// Checks a part name we are about to write (docs/FORMAT.md §2).
///
/// # Errors
///
/// `Error::InvalidName` with the reason the part name is refused.
pub fn check_part(key: &str, part: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidName(format!(
            "invalid part name {part:?} for key {key:?}: {why}"
        )))
    };
    if part.is_empty() {
        return bad("it is empty");
    }
    if part.contains('/') {
        return bad("a part name may contain no '/'");
    }
    if part.chars().any(char::is_control) {
        return bad("it contains a control character");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_like_energon() {
        assert_eq!(split_name("0001.jpg"), Some(("0001", "jpg")));
        assert_eq!(
            split_name("0001.latents.pth"),
            Some(("0001", "latents.pth"))
        );
        assert_eq!(split_name("a.b/c.d"), Some(("a.b/c", "d")));
        assert_eq!(split_name("dir/.hidden"), Some(("dir/", "hidden")));
        assert_eq!(split_name("a/b/.x"), Some(("a/b/", "x")));
        assert_eq!(split_name("a.b/.x"), None);
        assert_eq!(split_name(".hidden"), None);
        assert_eq!(split_name("noext"), None);
        assert_eq!(split_name("a."), Some(("a", "")));
        assert_eq!(split_name("a.b/c"), None);
    }

    #[test]
    fn meta_like_energon() {
        assert!(is_meta("__meta__"));
        assert!(is_meta("__meta__/x.json"));
        assert!(is_meta("____"));
        assert!(!is_meta("___"));
        assert!(!is_meta("__info__.json"));
        assert!(!is_meta("x/__meta__"));
    }

    #[test]
    fn escaping_names() {
        assert!(escapes("/etc/passwd"));
        assert!(escapes("../x.txt"));
        assert!(escapes("a/../../x.txt"));
        assert!(!escapes("a..b.txt"));
    }

    #[test]
    fn key_rules() {
        assert!(check_key("0000000001").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key("a.b").is_err());
        assert!(check_key("a/b").is_err());
        assert!(check_key("__x").is_err());
        assert!(check_part("k", "latents.pth").is_ok());
        assert!(check_part("k", "a/b").is_err());
        assert!(check_part("k", "").is_err());
    }
}
