//! The names the header records its choices by (`"executor": "docker"`).
//! They are the trajectory's format, so they live here beside the header
//! rather than in derives on the domain types: renaming a variant cannot
//! change what a new trajectory says or what an old one means. A run
//! directory is data anyone may have edited, so a name no runner writes
//! is an error saying which names there are, never a panic.

use serde::{Deserialize, Deserializer, Serializer};

use crate::approve::ApproveMode;
use crate::backend_kind::BackendKind;
use crate::exec::backend::{Network, WorkspaceMode};
use crate::exec::shell::ShellMode;
use crate::model::provider::Provider;
use crate::model::tool_choice::ToolChoice;

/// A choice the header records by name.
pub trait Named: Sized {
    /// What this value is recorded as.
    fn name(&self) -> &str;
    /// The value recorded as `name`, or what a name must be.
    fn from_name(name: &str) -> Result<Self, String>;
}

/// Implements [`Named`] for a fieldless enum: each value and its name.
macro_rules! named {
    ($ty:ty: $($v:path => $name:literal),+ $(,)?) => {
        impl Named for $ty {
            fn name(&self) -> &str {
                match self {
                    $($v => $name,)+
                }
            }

            fn from_name(name: &str) -> Result<Self, String> {
                match name {
                    $($name => Ok($v),)+
                    _ => Err(format!("expected {}", [$($name),+].join(", "))),
                }
            }
        }
    };
}

named!(Provider: Provider::Anthropic => "anthropic", Provider::Openai => "openai",
    Provider::Scripted => "scripted");
named!(BackendKind: BackendKind::Docker => "docker", BackendKind::Local => "local");
named!(Network: Network::None => "none", Network::Bridge => "bridge",
    Network::Allowlist => "allowlist");
named!(WorkspaceMode: WorkspaceMode::Auto => "auto", WorkspaceMode::Bind => "bind",
    WorkspaceMode::Copy => "copy");
named!(ShellMode: ShellMode::Fresh => "fresh", ShellMode::Persistent => "persistent");
named!(ApproveMode: ApproveMode::Never => "never", ApproveMode::Risky => "risky",
    ApproveMode::Always => "always");

/// `auto`, `required`, `none` or a tool's name, as `--tool-choice` takes it.
impl Named for ToolChoice {
    fn name(&self) -> &str {
        self.as_str()
    }

    fn from_name(name: &str) -> Result<Self, String> {
        ToolChoice::parse(name)
    }
}

/// Most characters of a recorded name an error quotes: the name is
/// whatever the file holds.
const QUOTED_CHARS: usize = 64;

/// The error of a recorded `name` that is none of `T`'s.
fn unknown<E: serde::de::Error>(name: &str, why: String) -> E {
    let mut quoted: String = name.chars().take(QUOTED_CHARS).collect();
    if quoted.len() < name.len() {
        quoted.push_str("...");
    }
    E::custom(format!("unknown value `{quoted}`, {why}"))
}

/// `#[serde(with = "by_name")]`: a setting recorded by its name, `None`
/// when not recorded (or null).
pub mod by_name {
    use super::*;

    pub fn serialize<T: Named, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(v.name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Named, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        let Some(name) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        T::from_name(&name)
            .map(Some)
            .map_err(|why| unknown(&name, why))
    }
}

/// `#[serde(with = "nullable_by_name")]`: a setting recorded by its name,
/// or as `null` when unset (`tool_choice`); `None` when not recorded.
pub mod nullable_by_name {
    use super::*;

    pub fn serialize<T: Named, S: Serializer>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(Some(v)) => s.serialize_str(v.name()),
            _ => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Named, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        super::by_name::deserialize(d).map(Some)
    }
}

/// `#[serde(deserialize_with = "nullable")]`: a setting recorded as `null`
/// when unset reads as `Some(None)`, told apart from one not recorded
/// (`None`, an older runner), so what was recorded is written back as it
/// was and compared as it was.
pub fn nullable<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name is the one the runner before the typed header wrote
    /// (`as_str`, or the lowercased `Debug` of the sandbox's enums).
    #[test]
    fn the_names_are_those_recorded_before() {
        fn both<T: Named + std::fmt::Debug + PartialEq>(all: &[T], before: impl Fn(&T) -> String) {
            for v in all {
                assert_eq!(v.name(), before(v), "{v:?}");
                assert_eq!(T::from_name(&before(v)).as_ref(), Ok(v));
            }
        }
        let debug = |v: &dyn std::fmt::Debug| format!("{v:?}").to_lowercase();
        both(&Provider::ALL, |p| p.as_str().to_string());
        both(&ShellMode::ALL, |s| s.as_str().to_string());
        both(&ApproveMode::ALL, |a| a.as_str().to_string());
        both(&BackendKind::ALL, |b| debug(b));
        let networks = [Network::None, Network::Bridge, Network::Allowlist];
        both(&networks, |n| debug(n));
        let modes = [
            WorkspaceMode::Auto,
            WorkspaceMode::Bind,
            WorkspaceMode::Copy,
        ];
        both(&modes, |m| debug(m));
        let choices = [
            ToolChoice::Auto,
            ToolChoice::Required,
            ToolChoice::None,
            ToolChoice::Named("bash".into()),
        ];
        both(&choices, |c| c.as_str().to_string());
    }

    #[test]
    fn a_name_no_runner_writes_says_which_there_are() {
        let e = BackendKind::from_name("bogus").expect_err("refused");
        assert_eq!(e, "expected docker, local");
        assert!(Network::from_name("Bridge").is_err(), "names are exact");
        let long = serde_json::json!({"executor": "x".repeat(10_000)});
        let e = crate::run_header::RunHeader::read(&long).expect_err("refused");
        assert!(e.to_string().len() < 300, "{e}");
        assert!(ToolChoice::from_name("a b").is_err());
    }
}
