//! `org.vgpud1.Layouts` at `/org/vgpud1/layouts`: the operator's declarative layouts
//! (`etc/vgpud/layouts/NAME.toml`) listed, compared with the host and applied. An object of
//! its own, so that the manager's introspection stays small; calls go through the manager's
//! one dispatch point (limits, authorization, audit, events).

use zbus::interface;
use zbus::message::Header;

use super::error::{capped, Error, Result};
use super::manager::{blocking, Manager};
use super::options::{OptionReader, Options};
use crate::layout::{self, LayoutError};

/// The object path.
pub const PATH: &str = "/org/vgpud1/layouts";

/// `org.vgpud1.Layouts`: the manager's dispatch, for the layout methods.
pub struct LayoutsObject(pub(super) Manager);

impl From<LayoutError> for Error {
    fn from(e: LayoutError) -> Self {
        match e {
            LayoutError::NotFound { .. } => Error::NotFound(e.to_string()),
            LayoutError::BadName(_)
            | LayoutError::Invalid { .. }
            | LayoutError::TooLarge { .. } => Error::InvalidArgument(e.to_string()),
            LayoutError::Read(_) => Error::Failed(e.to_string()),
        }
    }
}

/// A row of ApplyLayout: status, GPU, action, subject, detail.
type StepRow = (String, String, String, String, String);

impl LayoutsObject {
    fn load(&self, name: &str) -> Result<layout::Layout> {
        Ok(layout::file::load(self.0.engine.host().root(), name)?)
    }
}

#[interface(name = "org.vgpud1.Layouts")]
impl LayoutsObject {
    /// The layouts in etc/vgpud/layouts: name, description.
    #[zbus(out_args("layouts"))]
    async fn list_layouts(
        &self,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<(String, String)>> {
        self.0
            .track("ListLayouts", async {
                self.0.admit(&header, "ListLayouts", &[], None).await?;
                let root = self.0.engine.host().root().to_path_buf();
                blocking(move || Ok(layout::file::list(&root))).await
            })
            .await
    }

    /// Plans a layout on the host and applies it without taking away anything in use:
    /// steps as (status, GPU, action, subject, detail); status is planned, done, failed,
    /// refused (in the way, named) or skipped. Option: dry_run (b).
    #[zbus(out_args("steps"))]
    async fn apply_layout(
        &self,
        #[zbus(header)] header: Header<'_>,
        name: String,
        options: Options,
    ) -> Result<Vec<StepRow>> {
        self.0
            .track("ApplyLayout", async {
                let cause = self
                    .0
                    .admit(
                        &header,
                        "ApplyLayout",
                        &[("name", &name, layout::file::MAX_NAME)],
                        Some(&options),
                    )
                    .await?;
                let mut opts = OptionReader::new("ApplyLayout", options);
                let dry_run = opts.boolean("dry_run")?.unwrap_or(false);
                opts.finish(&["dry_run"])?;
                let wanted = self.load(&name)?;
                let engine = self.0.engine.clone();
                let outcomes = if dry_run {
                    blocking(move || Ok(layout::apply(&engine, &wanted, true))).await??
                } else {
                    // From now on pools are filled from this layout.
                    let active = name.clone();
                    self.0
                        .changing(cause, &format!("layout {name}"), move || {
                            let outcomes = layout::apply(&engine, &wanted, false);
                            if outcomes.is_ok() {
                                layout::pools::activate(&engine, &active).map_err(|e| {
                                    crate::engine::EngineError::persist(
                                        format!("recording layout {active} as the active one"),
                                        e,
                                    )
                                })?;
                            }
                            Ok(outcomes)
                        })
                        .await??
                };
                Ok(outcomes
                    .into_iter()
                    .map(|o| {
                        (
                            o.status.name().to_string(),
                            o.gpu,
                            o.action,
                            o.subject,
                            capped(o.detail),
                        )
                    })
                    .collect())
            })
            .await
    }

    /// What differs between a layout and the host: GPU, item, wanted, actual.
    #[zbus(out_args("differences"))]
    async fn diff_layout(
        &self,
        #[zbus(header)] header: Header<'_>,
        name: String,
    ) -> Result<Vec<(String, String, String, String)>> {
        self.0
            .track("DiffLayout", async {
                self.0
                    .admit(
                        &header,
                        "DiffLayout",
                        &[("name", &name, layout::file::MAX_NAME)],
                        None,
                    )
                    .await?;
                let wanted = self.load(&name)?;
                let engine = self.0.engine.clone();
                let diffs = blocking(move || {
                    let view = layout::host_view(&engine);
                    let now = crate::persist::now_unix();
                    let sized = layout::pools::sized(&engine, &wanted, &view, now);
                    Ok(layout::plan::diff(&sized, &view))
                })
                .await?;
                layout::plan::within_answer(diffs.len())?;
                Ok(diffs
                    .into_iter()
                    .map(|d| (d.gpu, d.item, d.wanted, d.actual))
                    .collect())
            })
            .await
    }
}
