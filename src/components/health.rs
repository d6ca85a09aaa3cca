//! Health rules for kinds osbx renders that have no Ready condition of their own (a Pool), stated
//! once, in a form two evaluators share:
//! - Flux evaluates them as CEL (`healthCheckExprs` on the layer's Kustomization, Flux ≥ 2.5);
//! - osbx evaluates them here (apply's wait and verify).
//!
//! A rule is a list of comparisons that must all hold for the object to be healthy. Flux runs
//! `current` after its own check that `status.observedGeneration` has caught up with
//! `metadata.generation`, and reads anything else as in progress. An object with no status yet
//! fails the CEL evaluation; Flux then reports it as unknown, which is still not Ready.

use serde_json::Value;

use crate::object::KnownKind;

/// How two numbers must compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Equal.
    Eq,
    /// At least.
    Ge,
    /// At most.
    Le,
}

impl Op {
    fn cel(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ge => ">=",
            Op::Le => "<=",
        }
    }

    /// The comparison that holds when this one does not (for messages).
    fn negated(self) -> &'static str {
        match self {
            Op::Eq => "≠",
            Op::Ge => "<",
            Op::Le => ">",
        }
    }

    fn holds(self, a: i64, b: i64) -> bool {
        match self {
            Op::Eq => a == b,
            Op::Ge => a >= b,
            Op::Le => a <= b,
        }
    }
}

/// The right-hand side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand {
    /// A field of the object (`spec.capacitySpec.poolMin`).
    Field(&'static str),
    /// 1 when the field is positive, else 0 ("at least one, if any are asked for").
    OneIfPositive(&'static str),
}

/// One comparison: `left op right`, `left` a field of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Term {
    /// The field compared (`status.total`).
    pub(crate) left: &'static str,
    /// How.
    pub(crate) op: Op,
    /// With what.
    pub(crate) right: Operand,
}

/// A kind's health rule.
#[derive(Debug)]
pub(crate) struct Health {
    /// The kind it applies to.
    pub(crate) kind: KnownKind,
    /// What must all hold for an object of the kind to be healthy.
    pub(crate) current: &'static [Term],
}

/// A field's last name (`poolMin` of `spec.capacitySpec.poolMin`), for messages.
fn short(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

fn field(obj: &Value, path: &str) -> Option<i64> {
    path.split('.').try_fold(obj, |v, k| v.get(k)).and_then(Value::as_i64)
}

impl Health {
    /// The rule as Flux's CEL `current` expression.
    #[must_use]
    pub(crate) fn cel(&self) -> String {
        self.current
            .iter()
            .map(|t| {
                let right = match t.right {
                    Operand::Field(f) => f.to_owned(),
                    Operand::OneIfPositive(f) => format!("({f} > 0 ? 1 : 0)"),
                };
                format!("{} {} {right}", t.left, t.op.cel())
            })
            .collect::<Vec<_>>()
            .join(" && ")
    }

    /// Whether `obj` is healthy, with why: the first comparison that does not hold (`total 0 <
    /// poolMin 1`), or the values it holds (`total 2, available 1`).
    #[must_use]
    pub(crate) fn evaluate(&self, obj: &Value) -> (bool, String) {
        if obj["status"].as_object().is_none_or(serde_json::Map::is_empty) {
            return (false, "no status yet (is its controller running?)".into());
        }
        let mut seen = Vec::new();
        for t in self.current {
            let Some(a) = field(obj, t.left) else { return (false, format!("no {}", t.left)) };
            let (b, name) = match t.right {
                Operand::Field(f) => (field(obj, f), short(f).to_owned()),
                Operand::OneIfPositive(f) => (field(obj, f).map(|v| i64::from(v > 0)), String::new()),
            };
            let Some(b) = b else { return (false, "an unreadable right-hand side".into()) };
            if !t.op.holds(a, b) {
                let rhs = if name.is_empty() { b.to_string() } else { format!("{name} {b}") };
                return (false, format!("{} {a} {} {rhs}", short(t.left), t.op.negated()));
            }
            if t.left.starts_with("status.") && t.op != Op::Eq && !seen.iter().any(|(n, _)| *n == short(t.left)) {
                seen.push((short(t.left), a));
            }
        }
        (true, seen.iter().map(|(n, v)| format!("{n} {v}")).collect::<Vec<_>>().join(", "))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::components::pools::HEALTH;

    fn pool(total: i64, available: i64) -> serde_json::Value {
        json!({"metadata": {"generation": 2},
               "spec": {"capacitySpec": {"bufferMin": 1, "bufferMax": 2, "poolMin": 1, "poolMax": 3}},
               "status": {"observedGeneration": 2, "total": total, "allocated": 0, "available": available}})
    }

    #[test]
    fn the_pool_rule_reads_as_cel_and_holds_where_it_says() {
        assert_eq!(
            HEALTH.cel(),
            "status.observedGeneration == metadata.generation && status.total >= spec.capacitySpec.poolMin \
             && status.total <= spec.capacitySpec.poolMax && status.available >= (spec.capacitySpec.bufferMin > 0 ? 1 : 0)"
        );
        assert_eq!(HEALTH.evaluate(&pool(2, 1)), (true, "total 2, available 1".into()));
        assert_eq!(HEALTH.evaluate(&pool(0, 0)), (false, "total 0 < poolMin 1".into()));
        assert_eq!(HEALTH.evaluate(&pool(4, 2)), (false, "total 4 > poolMax 3".into()));
        assert_eq!(HEALTH.evaluate(&pool(2, 0)), (false, "available 0 < 1".into()));
        let mut stale = pool(2, 1);
        stale["status"]["observedGeneration"] = json!(1);
        assert_eq!(HEALTH.evaluate(&stale), (false, "observedGeneration 1 ≠ generation 2".into()));
        assert!(!HEALTH.evaluate(&json!({"spec": {}})).0);
    }
}
