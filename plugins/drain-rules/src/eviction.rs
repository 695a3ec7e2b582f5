//! The eviction API's rules: what `POST pods/NAME/eviction` (what `kubectl drain`, node-pool
//! upgrades and the cluster autoscaler call) answers for one pod.

use crate::model::{Pod, PodDisruptionBudget};
use crate::selector;

/// What the eviction API does with one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// The pod is not running (pending, finished) or already terminating: evicted without
    /// consulting any budget.
    IgnoresBudgets,
    /// No budget selects the pod: evicted.
    NoBudget,
    /// A not-ready pod evicted without using the budget: `AlwaysAllow`, or
    /// `IfHealthyBudget` with the budget currently satisfied.
    UnhealthyAllowed,
    /// Evicted; the budget's `disruptionsAllowed` is decremented.
    Allowed,
    /// Refused with 429 Too Many Requests: the budget allows no eviction now (or its status
    /// is older than its spec).
    Refused {
        /// The budget's name.
        budget: String,
    },
    /// Refused with 500: more than one budget selects the pod, which the eviction API does
    /// not support.
    MultipleBudgets {
        /// The budgets' names.
        budgets: Vec<String>,
    },
}

/// What the eviction API answers for `pod`, given the budgets of the cluster and their
/// current status (a budget without status counts as allowing nothing).
///
/// Mirrors `EvictionREST.Create` and `checkAndDecrement`
/// (`pkg/registry/core/pod/storage/eviction.go`): `canIgnorePDB` (phase `Succeeded`,
/// `Failed` or `Pending`, or a deletion timestamp), `getPodDisruptionBudgets` (budgets of
/// the pod's namespace whose selector selects it; more than one is an error), then for a pod
/// that is not ready the `unhealthyPodEvictionPolicy` (`AlwaysAllow`, or `IfHealthyBudget`
/// when `currentHealthy >= desiredHealthy > 0`), then the budget's `disruptionsAllowed`.
pub fn evict(pod: &Pod, budgets: &[PodDisruptionBudget]) -> Eviction {
    if matches!(pod.phase(), "Succeeded" | "Failed" | "Pending") || pod.is_terminating() {
        return Eviction::IgnoresBudgets;
    }
    let selecting: Vec<&PodDisruptionBudget> = budgets
        .iter()
        .filter(|budget| {
            budget.metadata.namespace() == pod.metadata.namespace()
                && selector::matches(budget.spec.selector.as_ref(), &pod.metadata.labels)
                    .unwrap_or(false)
        })
        .collect();
    let budget = match selecting.as_slice() {
        [] => return Eviction::NoBudget,
        [budget] => *budget,
        several => {
            return Eviction::MultipleBudgets {
                budgets: several.iter().map(|b| b.metadata.name.clone()).collect(),
            };
        }
    };
    let status = budget.status.clone().unwrap_or_default();
    if !pod.is_ready() {
        if budget.spec.unhealthy_pod_eviction_policy.as_deref() == Some("AlwaysAllow") {
            return Eviction::UnhealthyAllowed;
        }
        if status.current_healthy >= status.desired_healthy && status.desired_healthy > 0 {
            return Eviction::UnhealthyAllowed;
        }
    }
    let stale = matches!(
        (status.observed_generation, budget.metadata.generation),
        (Some(observed), Some(generation)) if observed < generation
    );
    if stale || status.disruptions_allowed <= 0 {
        return Eviction::Refused {
            budget: budget.metadata.name.clone(),
        };
    }
    Eviction::Allowed
}
