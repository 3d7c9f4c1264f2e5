//! What the studio's runs produced for one open model, kept while it is open: statistics, the
//! last comparison, scan and auto-exclude, and what was saved. GUI-free engine values.

use std::path::PathBuf;
use std::sync::Arc;

use crate::calib::CalibrationStats;
use crate::eval::search::auto_exclude::AutoExclude;
use crate::recipe::Recipe;
use crate::workflow::compare::Comparison;
use crate::workflow::reference::CapturedReference;
use crate::workflow::sensitivity::Scanned;

/// The results of one open model's runs.
#[derive(Debug, Clone, Default)]
pub struct WorkResults {
    /// Cached statistics.
    pub stats: Option<Arc<CalibrationStats>>,
    /// The statistics were saved (or loaded) since they were made.
    pub stats_saved: bool,
    /// The last comparison.
    pub comparison: Option<Comparison>,
    /// The last sensitivity scan.
    pub scanned: Option<Scanned>,
    /// The last auto-exclude result.
    pub auto_excluded: Option<AutoExclude>,
    /// The recipe as last saved with a model (or as a recipe file).
    pub saved_recipe: Option<Recipe>,
    /// Where the QDQ model was last saved.
    pub saved_model: Option<PathBuf>,
}

impl WorkResults {
    /// The last comparison when it is for `recipe` (results of an older recipe are shown
    /// greyed, and not saved in reports).
    pub fn fresh_comparison(&self, recipe: &Recipe) -> Option<&Comparison> {
        self.comparison.as_ref().filter(|c| &c.recipe == recipe)
    }

    /// A float reference captured before (by a comparison or a scan), for the next run.
    pub fn reference(&self) -> Option<CapturedReference> {
        self.comparison
            .as_ref()
            .map(|c| c.reference.clone())
            .or_else(|| self.scanned.as_ref().map(|s| s.reference.clone()))
    }

    /// True when there is work the user would lose: a recipe changed since it was last
    /// saved, or statistics that were neither saved nor used in a saved model.
    pub fn unsaved(&self, recipe: &Recipe, recipe_edited: bool) -> bool {
        let recipe_unsaved = recipe_edited && self.saved_recipe.as_ref() != Some(recipe);
        let stats_unsaved = self.stats.is_some() && !self.stats_saved && self.saved_model.is_none();
        recipe_unsaved || stats_unsaved
    }

    /// New statistics: results that depend on them are forgotten.
    pub fn statistics_replaced(&mut self, stats: CalibrationStats, saved: bool) {
        self.stats = Some(Arc::new(stats));
        self.stats_saved = saved;
        self.scanned = None;
        self.auto_excluded = None;
    }
}
