//! Profiles: load a YAML document, check it, and hand out a [`LoadedProfile`].
//!
//! Loading is strict. Unknown fields, wrong types and missing fields are reported by serde with a
//! position; the rules in [`validate`] are reported at the position of the field they name. All
//! errors are collected and returned together, each as `file:line:column: field: message`.

mod document;
pub(crate) mod pins;
mod validate;
mod verify;

use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::spec::{Images, Locations, Mirror, Pos, Sealed, Secrets, Sops, TargetCluster, Violation, Violations};
pub use document::*;
pub use verify::{SpiffeSmoke, Verify};

use crate::embedded;

/// Where a profile comes from.
#[derive(Debug, Clone)]
pub enum ProfileSource {
    /// A profile compiled into the binary, by name (`homelab`).
    Embedded(String),
    /// A file on disk.
    File(PathBuf),
}

/// The embedded profile used when no `--profile` is given.
pub(crate) const DEFAULT_PROFILE: &str = "default";

impl ProfileSource {
    /// Resolve a `--profile` argument: an existing file or anything that looks like a path is a
    /// file, otherwise the name of an embedded profile.
    #[must_use]
    pub fn from_arg(arg: Option<&str>) -> Self {
        match arg {
            None => ProfileSource::Embedded(DEFAULT_PROFILE.into()),
            Some(a)
                if Path::new(a).is_file()
                    || a.contains('/')
                    || Path::new(a)
                        .extension()
                        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml")) =>
            {
                ProfileSource::File(PathBuf::from(a))
            }
            Some(a) => ProfileSource::Embedded(a.to_owned()),
        }
    }
}

/// One problem in a profile, with its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// File name as shown to the user (`profiles/homelab.yaml`).
    pub file: String,
    /// Where.
    pub pos: Pos,
    /// Field path, when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.pos.line, self.pos.column)?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read profile {path}: {source}")]
    Read {
        /// The path given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// No embedded profile has that name.
    #[error("no embedded profile named {name:?} (embedded: {known}); pass a file path to use your own")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The embedded names.
        known: String,
    },
    /// The document is not a valid profile.
    #[error("invalid profile:\n{}", .0.iter().map(|d| format!("  {d}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Diagnostic>),
}

impl ProfileError {
    /// The individual problems, for callers that print or count them.
    #[must_use]
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ProfileError::Invalid(d) => d,
            _ => &[],
        }
    }
}

/// A profile that passed validation, with where it came from.
#[derive(Debug)]
pub struct LoadedProfile {
    /// The document, with every default filled in.
    pub profile: Profile,
    /// The name shown in messages (`profiles/homelab.yaml` or the path given).
    pub origin: String,
    /// The source text (empty for a fleet member, which has none of its own).
    pub text: String,
    /// Field positions in the source text.
    pub locations: Locations,
    /// The profile's sealed Secret files, as the repository it renders into holds them (empty
    /// until a command that has the repository reads them: [`crate::secrets::read`]).
    pub sealed: crate::spec::Sealed,
}

impl LoadedProfile {
    /// The fields the profile does not write and osbx filled in with their defaults, each value
    /// (a scalar, or a whole list) with its field path. Empty for a profile without source text
    /// (a fleet member).
    #[must_use]
    pub fn filled_in(&self) -> Vec<(String, serde_json::Value)> {
        fn walk(v: &serde_json::Value, at: &str, locs: &Locations, out: &mut Vec<(String, serde_json::Value)>) {
            let written = !at.is_empty() && locs.get(at).is_some();
            match v {
                serde_json::Value::Null => {}
                serde_json::Value::Object(map) => {
                    for (k, child) in map {
                        walk(child, &if at.is_empty() { k.clone() } else { format!("{at}.{k}") }, locs, out);
                    }
                }
                serde_json::Value::Array(items) if written => {
                    for (i, child) in items.iter().enumerate() {
                        walk(child, &format!("{at}[{i}]"), locs, out);
                    }
                }
                _ if !written => out.push((at.to_owned(), v.clone())),
                _ => {}
            }
        }
        let mut out = Vec::new();
        if !self.text.is_empty() {
            walk(&serde_json::to_value(&self.profile).unwrap_or_default(), "", &self.locations, &mut out);
        }
        // An unnamed profile is named after its cluster.
        for (field, value) in &mut out {
            if field == "metadata.name" {
                *value = serde_json::Value::String(self.profile.name().to_owned());
            }
        }
        out
    }
}

/// Names and descriptions of the embedded profiles.
#[must_use]
pub(crate) fn embedded_profiles() -> Vec<(String, Option<String>)> {
    embedded::profiles()
        .iter()
        .map(|(file, text)| {
            let name = file.trim_end_matches(".yaml").to_owned();
            let description = serde_saphyr::from_str::<Profile>(text).ok().and_then(|p| p.metadata.description);
            (name, description)
        })
        .collect()
}

/// Read and check a profile.
///
/// # Errors
/// [`ProfileError`] with every problem found.
pub fn load(source: &ProfileSource) -> Result<LoadedProfile, ProfileError> {
    let (origin, text) = match source {
        ProfileSource::File(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| ProfileError::Read { path: path.clone(), source: e })?;
            (path.display().to_string(), text)
        }
        ProfileSource::Embedded(name) => embedded_text(name)?,
    };
    parse(&origin, text)
}

/// The text of an embedded profile and the name shown for it.
///
/// # Errors
/// [`ProfileError::Unknown`] when no embedded profile has that name.
pub fn embedded_text(name: &str) -> Result<(String, String), ProfileError> {
    let file = format!("{name}.yaml");
    let Some((_, text)) = embedded::profiles().iter().find(|(f, _)| *f == file) else {
        let known = embedded_profiles().into_iter().map(|(n, _)| n).collect::<Vec<_>>().join(", ");
        return Err(ProfileError::Unknown { name: name.to_owned(), known });
    };
    Ok((format!("profiles/{file}"), (*text).to_owned()))
}

/// A profile from an already parsed document (a fleet member: the base with its overrides
/// merged in). The text is produced only when the document is rejected, to locate the problems
/// in it (see [`parse`]).
///
/// # Errors
/// [`ProfileError::Invalid`] with every problem found, located.
pub fn from_value(origin: &str, value: &serde_json::Value) -> Result<LoadedProfile, ProfileError> {
    if let Ok(mut profile) = serde::Deserialize::deserialize(value).map(|p: Profile| p)
        && validate::settle(&mut profile).is_empty()
    {
        return Ok(LoadedProfile {
            profile,
            origin: origin.to_owned(),
            text: String::new(),
            locations: Locations::default(),
            sealed: crate::spec::Sealed::default(),
        });
    }
    parse(origin, serde_saphyr::to_string(value).unwrap_or_default())
}

/// Parse and check profile text; `origin` names it in messages.
///
/// # Errors
/// [`ProfileError::Invalid`] with every problem found.
pub fn parse(origin: &str, text: String) -> Result<LoadedProfile, ProfileError> {
    let locations = Locations::index(&text);
    let mut profile: Profile = match serde_saphyr::from_str(&text) {
        Ok(p) => p,
        Err(e) => return Err(ProfileError::Invalid(vec![serde_diagnostic(origin, &text, &locations, &e)])),
    };
    let violations = validate::settle(&mut profile);
    if !violations.is_empty() {
        let diagnostics = violations
            .into_iter()
            .map(|v| Diagnostic {
                file: origin.to_owned(),
                pos: locations.find(&v.field),
                field: Some(v.field),
                message: v.message,
            })
            .collect();
        return Err(ProfileError::Invalid(diagnostics));
    }
    Ok(LoadedProfile { profile, origin: origin.to_owned(), text, locations, sealed: crate::spec::Sealed::default() })
}

/// A deserializer error as a diagnostic with its position and (when known) field path.
pub(crate) fn serde_diagnostic(origin: &str, text: &str, locations: &Locations, e: &serde_saphyr::Error) -> Diagnostic {
    let pos = e
        .location()
        .map(|l| Pos { line: usize::try_from(l.line()).unwrap_or(0), column: usize::try_from(l.column()).unwrap_or(0) })
        .filter(|p| p.line > 0)
        .unwrap_or(Pos { line: 1, column: 1 });
    let mut field = locations.path_at(pos).filter(|p| !p.is_empty()).map(str::to_owned);
    let message = e.without_snippet().to_string();
    // The plain message may repeat the position; keep only the text.
    let mut message = message.split(" at line ").next().unwrap_or(&message).trim().to_owned();
    // serde reports a missing field at the last key of the mapping: name the missing one instead.
    if let Some(missing) = message.strip_prefix("missing field `").and_then(|m| m.split('`').next()) {
        let parent = field.as_deref().and_then(|f| f.rfind('.').map(|cut| &f[..cut])).unwrap_or("");
        field = Some(if parent.is_empty() { missing.to_owned() } else { format!("{parent}.{missing}") });
    }
    // Terse scalar errors ("invalid i64"): say what was expected and what was found.
    if let Some(kind) = message.strip_prefix("invalid ") {
        let expected = match kind {
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" => Some("an integer"),
            "f32" | "f64" => Some("a number"),
            "bool" => Some("true or false"),
            _ => None,
        };
        if let Some(expected) = expected {
            let found = scalar_at(text, pos);
            message = format!("expected {expected}, found {found:?}");
        }
    }
    Diagnostic { file: origin.to_owned(), pos, field, message }
}

/// The plain scalar text starting at `pos` (up to a flow or comment delimiter).
fn scalar_at(text: &str, pos: Pos) -> String {
    let line = text.lines().nth(pos.line.saturating_sub(1)).unwrap_or("");
    let rest: String = line.chars().skip(pos.column.saturating_sub(1)).collect();
    rest.split([',', '}', ']', '#']).next().unwrap_or("").trim().to_owned()
}
