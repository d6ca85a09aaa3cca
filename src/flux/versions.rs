//! Version constraints as Flux reads them: source-controller resolves a `GitRepository`'s
//! `spec.ref.semver` (and an `OCIRepository`'s) with the Go library Masterminds/semver v3, whose
//! rules are not Cargo's. Facts (Masterminds/semver v3 `constraints.go`, fluxcd/pkg
//! `version.ParseVersion`), re-stated here, not ported:
//!
//! - A constraint is alternatives joined by `||`; each is comparisons joined by `,` or
//!   whitespace; `A - B` is `>= A, <= B`.
//! - A comparison is an operator (`=`, none, `!=`, `>`, `<`, `>=`, `=>`, `<=`, `=<`, `~`, `~>`,
//!   `^`) and a version of one to three numbers (`v` allowed; a number may be `x`, `X` or `*`), a
//!   pre-release and build metadata. Without an operator, or with `=`, a whole version is exact
//!   (`0.2.2` is 0.2.2, where Cargo would read `^0.2.2`); one with a wildcard or a missing part is
//!   a tilde range (`1.2` is `>=1.2.0 <1.3.0`).
//! - `~1.2.3` is `>=1.2.3 <1.3.0`, `~1` is `>=1.0.0 <2.0.0`; `^1.2.3` is `>=1.2.3 <2.0.0`,
//!   `^0.2.3` `>=0.2.3 <0.3.0`, `^0.0.3` exactly 0.0.3.
//! - A pre-release version matches only a comparison whose version has a pre-release itself.
//! - A tag is a candidate when it is a strict semantic version, `v` allowed (`version.ParseVersion`:
//!   `1.2` is no tag of a semver range); the highest candidate that matches is taken. Build
//!   metadata is ignored in comparisons.

use std::cmp::Ordering;

use semver::Version;

/// An operator of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `=` or none: exact, or a tilde range when the version is partial.
    TildeOrEqual,
    NotEqual,
    Greater,
    Less,
    GreaterEqual,
    LessEqual,
    Tilde,
    Caret,
}

/// One comparison: an operator and its version, with which parts were wildcards or missing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Comparison {
    op: Op,
    version: Version,
    /// The minor part (and so the patch) is a wildcard or missing.
    minor_dirty: bool,
    /// The patch part is a wildcard or missing.
    patch_dirty: bool,
    /// Some part is a wildcard or missing (the major one too, then neither flag above is set).
    dirty: bool,
}

/// A constraint: any of its alternatives, each all of its comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Constraint(Vec<Vec<Comparison>>);

/// The operators, longest first so that `>=` is not read as `>`.
const OPS: [(&str, Op); 11] = [
    (">=", Op::GreaterEqual),
    ("=>", Op::GreaterEqual),
    ("<=", Op::LessEqual),
    ("=<", Op::LessEqual),
    ("!=", Op::NotEqual),
    ("~>", Op::Tilde),
    (">", Op::Greater),
    ("<", Op::Less),
    ("=", Op::TildeOrEqual),
    ("~", Op::Tilde),
    ("^", Op::Caret),
];

fn is_x(part: &str) -> bool {
    matches!(part, "x" | "X" | "*")
}

/// Whether `s` is one dot-separated identifier list of a pre-release or build metadata.
fn identifiers(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
}

/// The version of a comparison (`1`, `1.2`, `v1.2.x`, `1.2.3-rc.1+b`).
fn comparison(op: Op, text: &str) -> Result<Comparison, String> {
    let bad = || format!("{text:?} is not a version of a constraint");
    let body = text.strip_prefix('v').unwrap_or(text);
    let (body, _build) = match body.split_once('+') {
        Some((b, build)) if identifiers(build) => (b, Some(build)),
        Some(_) => return Err(bad()),
        None => (body, None),
    };
    let (numbers, pre) = match body.split_once('-') {
        Some((n, pre)) if identifiers(pre) => (n, pre),
        Some(_) => return Err(bad()),
        None => (body, ""),
    };
    let parts: Vec<&str> = numbers.split('.').collect();
    if parts.len() > 3 || parts.iter().any(|p| p.is_empty() || !(is_x(p) || p.chars().all(|c| c.is_ascii_digit()))) {
        return Err(bad());
    }
    let number = |p: &str| p.parse::<u64>().map_err(|_| bad());
    let (mut minor_dirty, mut patch_dirty, mut dirty) = (false, false, false);
    let (major, minor, patch) = if is_x(parts[0]) {
        dirty = true;
        (0, 0, 0)
    } else if parts.len() < 2 || is_x(parts[1]) {
        (minor_dirty, dirty) = (true, true);
        (number(parts[0])?, 0, 0)
    } else if parts.len() < 3 || is_x(parts[2]) {
        (patch_dirty, dirty) = (true, true);
        (number(parts[0])?, number(parts[1])?, 0)
    } else {
        (number(parts[0])?, number(parts[1])?, number(parts[2])?)
    };
    let mut version = Version::new(major, minor, patch);
    if !pre.is_empty() {
        version.pre = semver::Prerelease::new(pre).map_err(|_| bad())?;
    }
    Ok(Comparison { op, version, minor_dirty, patch_dirty, dirty })
}

impl Constraint {
    /// Read `text` as Masterminds/semver reads a constraint.
    ///
    /// # Errors
    /// Why it is not one.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut any = Vec::new();
        for alternative in text.split("||") {
            let tokens: Vec<&str> = alternative.split([',', ' ', '\t']).filter(|t| !t.is_empty()).collect();
            if tokens.is_empty() {
                return Err(format!("{text:?}: an alternative of the constraint is empty"));
            }
            let mut all = Vec::new();
            let mut i = 0;
            while i < tokens.len() {
                // `A - B`: a range of two bare versions.
                if tokens.get(i + 1) == Some(&"-") {
                    let (Some(low), Some(high)) = (tokens.get(i), tokens.get(i + 2)) else {
                        return Err(format!("{text:?}: a range needs a version on each side of '-'"));
                    };
                    all.push(comparison(Op::GreaterEqual, low)?);
                    all.push(comparison(Op::LessEqual, high)?);
                    i += 3;
                    continue;
                }
                let token = tokens[i];
                let (op, rest) = OPS
                    .iter()
                    .find_map(|(s, op)| token.strip_prefix(s).map(|r| (*op, r)))
                    .unwrap_or((Op::TildeOrEqual, token));
                // An operator may stand apart from its version (`>= 1.2`).
                let version = if rest.is_empty() {
                    i += 1;
                    *tokens.get(i).ok_or_else(|| format!("{text:?}: {token} names no version"))?
                } else {
                    rest
                };
                all.push(comparison(op, version)?);
                i += 1;
            }
            any.push(all);
        }
        Ok(Self(any))
    }

    /// Whether `version` satisfies the constraint.
    #[must_use]
    pub(crate) fn matches(&self, version: &Version) -> bool {
        self.0.iter().any(|all| all.iter().all(|c| c.check(version)))
    }
}

impl Comparison {
    fn check(&self, v: &Version) -> bool {
        let c = &self.version;
        let cmp = v.cmp_precedence(c);
        let pre_excluded = !v.pre.is_empty() && c.pre.is_empty();
        if self.op == Op::NotEqual {
            return self.not_equal(v, cmp);
        }
        if pre_excluded {
            return false;
        }
        match self.op {
            Op::TildeOrEqual if self.dirty => self.tilde(v, cmp),
            Op::TildeOrEqual => cmp == Ordering::Equal,
            Op::Greater => {
                if !self.dirty {
                    cmp == Ordering::Greater
                } else if v.major != c.major {
                    v.major > c.major
                } else if self.minor_dirty {
                    false
                } else if self.patch_dirty {
                    v.minor > c.minor
                } else {
                    cmp == Ordering::Greater
                }
            }
            Op::Less => cmp == Ordering::Less,
            Op::GreaterEqual => cmp != Ordering::Less,
            Op::LessEqual => {
                if self.dirty {
                    v.major < c.major || (v.major == c.major && (self.minor_dirty || v.minor <= c.minor))
                } else {
                    cmp != Ordering::Greater
                }
            }
            Op::Tilde => self.tilde(v, cmp),
            Op::Caret => {
                if cmp == Ordering::Less {
                    false
                } else if c.major > 0 || self.minor_dirty {
                    v.major == c.major
                } else if v.major > 0 {
                    false
                } else if c.minor > 0 || self.patch_dirty {
                    v.minor == c.minor
                } else {
                    v.minor == 0 && v.patch == c.patch
                }
            }
            Op::NotEqual => unreachable!("handled above"),
        }
    }

    fn tilde(&self, v: &Version, cmp: Ordering) -> bool {
        let c = &self.version;
        if cmp == Ordering::Less {
            return false;
        }
        if c.major == 0 && c.minor == 0 && c.patch == 0 && !self.minor_dirty && !self.patch_dirty {
            return true;
        }
        v.major == c.major && (self.minor_dirty || v.minor == c.minor)
    }

    fn not_equal(&self, v: &Version, cmp: Ordering) -> bool {
        let c = &self.version;
        if self.dirty {
            if !v.pre.is_empty() && c.pre.is_empty() {
                return false;
            }
            if c.major != v.major {
                return true;
            }
            if self.minor_dirty {
                return false;
            }
            if c.minor != v.minor {
                return true;
            }
            if self.patch_dirty {
                return (!v.pre.is_empty() || !c.pre.is_empty()) && v.pre != c.pre;
            }
            if c.patch != v.patch {
                return true;
            }
        }
        cmp != Ordering::Equal
    }
}

/// A tag as source-controller reads it for a semver range: a strict semantic version, `v`
/// allowed.
#[must_use]
pub(crate) fn tag_version(tag: &str) -> Option<Version> {
    Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}

/// The tag of `tags` Flux resolves `constraint` to: the highest version that matches (of tags
/// naming the same version, the greatest name, so the answer never depends on their order).
#[must_use]
pub(crate) fn highest<'a>(constraint: &Constraint, tags: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    tags.into_iter()
        .filter_map(|t| tag_version(t).map(|v| (v, t)))
        .filter(|(v, _)| constraint.matches(v))
        .max_by(|a, b| a.0.cmp_precedence(&b.0).then_with(|| a.1.cmp(b.1)))
        .map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick<'a>(constraint: &str, tags: &[&'a str]) -> Option<&'a str> {
        highest(&Constraint::parse(constraint).unwrap(), tags.iter().copied())
    }

    /// Tags that tell Masterminds' rules (Flux's) from Cargo's apart.
    #[test]
    fn constraints_are_resolved_as_flux_resolves_them() {
        let tags =
            ["0.2.1", "0.2.2", "0.2.3", "v0.3.0", "1.0.0", "1.2.0-rc.1", "1.2.0", "1.4.5", "1.5.0", "2.0.0", "x1"];
        // Bare and `=`: exact (Cargo: ^0.2.2, the highest 0.2.x).
        assert_eq!(pick("0.2.2", &tags), Some("0.2.2"));
        assert_eq!(pick("v0.2.2", &tags), Some("0.2.2"));
        assert_eq!(pick("=0.2.2", &tags), Some("0.2.2"));
        assert!(semver::VersionReq::parse("0.2.2").unwrap().matches(&Version::new(0, 2, 3)), "Cargo reads ^0.2.2");
        // Partial and wildcards: tilde ranges.
        assert_eq!(pick("0.2", &tags), Some("0.2.3"));
        assert_eq!(pick("0.2.x", &tags), Some("0.2.3"));
        assert_eq!(pick("1.x", &tags), Some("1.5.0"));
        assert_eq!(pick("*", &tags), Some("2.0.0"));
        // `||` and hyphen ranges (the `v` prefix of a tag is read).
        assert_eq!(pick("0.2.1 || 0.3.0", &tags), Some("v0.3.0"));
        assert_eq!(pick("1.0.0 - 1.4.5", &tags), Some("1.4.5"));
        assert_eq!(pick(">= 1.0.0, < 1.5.0", &tags), Some("1.4.5"));
        assert_eq!(pick(">=1.0.0 <1.5.0", &tags), Some("1.4.5"));
        // Tilde and caret.
        assert_eq!(pick("~1.2.0", &tags), Some("1.2.0"));
        assert_eq!(pick("~1", &tags), Some("1.5.0"));
        assert_eq!(pick("^0.2.1", &tags), Some("0.2.3"));
        assert_eq!(pick("^0.0.3", &["0.0.3", "0.0.4"]), Some("0.0.3"));
        assert_eq!(pick("^1.2.0", &tags), Some("1.5.0"));
        // A pre-release only for a constraint that names one.
        assert_eq!(pick("1.2.0-rc.1", &tags), Some("1.2.0-rc.1"));
        assert_eq!(pick(">=1.1.0, <1.2.0", &tags), None);
        assert_eq!(pick(">=1.2.0-rc.0, <=1.2.0-rc.9", &tags), Some("1.2.0-rc.1"));
        // (Each comparison asks on its own: `<1.2.0` names no pre-release, so it takes none.)
        assert_eq!(pick(">=1.2.0-rc.0, <1.2.0", &tags), None);
        // `!=`, `>` and `<=` with partial versions.
        assert_eq!(pick("!=2.0.0", &tags), Some("1.5.0"));
        assert_eq!(pick(">1", &tags), Some("2.0.0"));
        assert_eq!(pick(">1.4, <2", &tags), Some("1.5.0"));
        assert_eq!(pick("<=1.4", &tags), Some("1.4.5"));
        // Nothing matches.
        assert_eq!(pick("3.x", &tags), None);
        // Not constraints.
        for bad in ["", "||", "1.2.3.4", "a.b", ">=", "1 -", "1.0.0-", "1..2"] {
            assert!(Constraint::parse(bad).is_err(), "{bad:?}");
        }
        // Tags that are not strict semantic versions are no candidates (fluxcd/pkg ParseVersion).
        assert_eq!(pick("*", &["1.2", "v1", "helm/opensandbox/0.2.2"]), None);
    }
}
