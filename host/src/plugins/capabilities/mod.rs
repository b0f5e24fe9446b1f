//! Host capabilities, one module each: the host side of every import a plugin may use.
//!
//! A capability is self-contained, the shape of Spin's "factors": its module owns its manifest
//! section (read and validated into its grant, with messages that name keys and never quote
//! values), what the host backs it with, its state per plugin and per instance, and its linker
//! wiring, all through one `Capability` implementation. It is registered by one line in the list
//! at the end of this file, which declares its module and generates the structs the rest of the
//! runtime holds: `Grants` in the manifest, `Services` in the host, `PluginStates` in each plugin's sandbox and
//! `InstanceStates` in each instance's store. Those are plain structs with one field per
//! capability, named as the module, so a host call reaches its state through a field, never a
//! lookup. Everything a plugin is not granted is denied.
//!
//! `stdio` is not a capability of its own: it is how `wasi` routes stdout and stderr to the log.

pub mod stdio;

use std::fmt;

use toml::{Table, Value};
use wasmtime::component::Linker;

use crate::plugins::capabilities::log::PluginLog;
use crate::plugins::loader::World;
use crate::plugins::manifest::{ManifestError, section_table};
use crate::plugins::sandbox::StoreState;

/// One host capability. Implemented by a type of its module (an empty enum: it is never a value)
/// and registered once in the list at the end of this file.
pub(crate) trait Capability {
    /// The manifest section it owns, if a manifest can grant it anything.
    const SECTION: Option<Section<Self::Grant>> = None;
    /// The worlds whose imports include it; a manifest granting it to a plugin of another world is
    /// refused at load ([`crate::plugins::LoadError::CapabilityOutsideWorld`]).
    const WORLDS: &'static [World] = &[World::DestinationHandler, World::PublishObserver];

    /// What a manifest grants. The default, also what a plugin without a manifest gets, grants
    /// nothing.
    type Grant: fmt::Debug + Clone + Default + PartialEq;
    /// What the host backs it with: the real host's by default, or the mock runner's.
    type Services: Clone + Default;
    /// Built once when a plugin loads and shared by its instances.
    type PluginState;
    /// Built for each instance's store; host calls get it by `&mut`.
    type InstanceState;

    fn plugin_state(
        grant: &Self::Grant,
        services: &Self::Services,
        log: &PluginLog,
    ) -> Self::PluginState;

    /// Runs for every store, so on the path of a plugin call: keep it cheap (clones of `Arc`s,
    /// a fresh context), and share what can be shared in the plugin state.
    fn instance_state(plugin: &Self::PluginState) -> Self::InstanceState;

    /// Links its imports; a host call reaches its state as the field of
    /// [`StoreState::capabilities`] named as its module.
    fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()>;
}

/// A manifest section a capability owns: its name (`http` for `[http]`) and how its entries become
/// the grant. A reader refuses an unknown key as `UnknownKey("<section>.<key>")` and names a bad
/// value by its key, never quoting it: `[config]` values are often secrets, and an allow-list
/// entry may carry credentials.
pub(crate) struct Section<G> {
    pub(crate) name: &'static str,
    pub(crate) read: fn(&Table) -> Result<G, ManifestError>,
}

/// Declares, from the list of capabilities, each one's module, the structs with one field per
/// capability and the functions that loop over them.
macro_rules! capabilities {
    ($($name:ident: $capability:ty),* $(,)?) => {
        $(pub mod $name;)*

        /// What a manifest grants, per capability.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub(crate) struct Grants {
            $(pub(crate) $name: <$capability as Capability>::Grant,)*
        }

        /// What the host backs each capability with.
        #[derive(Clone, Default)]
        pub(crate) struct Services {
            $(pub(crate) $name: <$capability as Capability>::Services,)*
        }

        /// One plugin's state of each capability, shared by its instances.
        pub(crate) struct PluginStates {
            $($name: <$capability as Capability>::PluginState,)*
        }

        /// One instance's state of each capability, in its store.
        pub(crate) struct InstanceStates {
            $(pub(crate) $name: <$capability as Capability>::InstanceState,)*
        }

        impl Grants {
            /// Reads the manifest section `name` into the grant of the capability that owns it;
            /// a section no capability owns is an unknown key.
            pub(crate) fn read_section(
                &mut self,
                name: &str,
                value: &Value,
            ) -> Result<(), ManifestError> {
                $(if let Some(section) = <$capability as Capability>::SECTION
                    && section.name == name
                {
                    self.$name = (section.read)(section_table(name, value)?)?;
                    return Ok(());
                })*
                Err(ManifestError::UnknownKey(name.to_owned()))
            }

            /// The section of the first capability granted that `world` does not import.
            pub(crate) fn outside(&self, world: World) -> Option<&'static str> {
                $(if let Some(section) = <$capability as Capability>::SECTION
                    && !<$capability as Capability>::WORLDS.contains(&world)
                    && self.$name != <$capability as Capability>::Grant::default()
                {
                    return Some(section.name);
                })*
                None
            }
        }

        impl PluginStates {
            pub(crate) fn new(grants: &Grants, services: &Services, log: &PluginLog) -> Self {
                Self {
                    $($name: <$capability as Capability>::plugin_state(
                        &grants.$name,
                        &services.$name,
                        log,
                    ),)*
                }
            }

            pub(crate) fn instance(&self) -> InstanceStates {
                InstanceStates {
                    $($name: <$capability as Capability>::instance_state(&self.$name),)*
                }
            }
        }

        /// The sections the capabilities own, in the order of the list.
        #[cfg(test)]
        fn sections() -> Vec<&'static str> {
            let mut names = Vec::new();
            $(names.extend(<$capability as Capability>::SECTION.map(|section| section.name));)*
            names
        }

        /// Links every import a plugin may have, whatever its manifest grants: what is not
        /// granted is denied by the capability's state, so a component importing more than it
        /// uses (as Python and JavaScript components do with WASI) still loads.
        pub(crate) fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
            $(<$capability as Capability>::add_to_linker(linker)?;)*
            Ok(())
        }
    };
}

// The registered capabilities: one line each, `module: type`; the line declares the module.
capabilities! {
    wasi: wasi::Wasi,
    http: http::Http,
    log: log::Log,
    config: config::Config,
    kafka: kafka::Kafka,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::manifest::Manifest;

    #[test]
    fn each_section_has_one_owner_and_limits_is_not_a_capability() {
        let mut sections = sections();
        for owned in ["http", "config", "kafka"] {
            assert!(sections.contains(&owned), "{owned}");
        }
        assert!(!sections.contains(&"limits"));
        let count = sections.len();
        sections.sort_unstable();
        sections.dedup();
        assert_eq!(sections.len(), count, "a section with two owners");
    }

    #[test]
    fn an_observer_may_not_be_granted_http_or_kafka() {
        for (text, section) in [
            (
                "[http]\nallowed_hosts = [\"https://a.example.com\"]",
                "http",
            ),
            ("[kafka]\ntopics = [\"orders\"]", "kafka"),
        ] {
            let grants = Manifest::parse(text).unwrap().grants;
            assert_eq!(grants.outside(World::PublishObserver), Some(section));
            assert_eq!(grants.outside(World::DestinationHandler), None);
        }
    }

    #[test]
    fn an_empty_grant_or_config_is_allowed_in_every_world() {
        for text in ["[http]\nallowed_hosts = []", "[config]\nchannel = \"#ops\""] {
            let grants = Manifest::parse(text).unwrap().grants;
            assert_eq!(grants.outside(World::PublishObserver), None, "{text}");
        }
    }
}
