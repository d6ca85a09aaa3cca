//! `flux.layers`: every Flux object the profile renders is Ready for its current generation.

use futures::future::BoxFuture;

use crate::cluster::operation::{Objects, Operation};
use crate::cluster::wait::status_of;
use crate::object::ObjectRef;
use crate::profile::Profile;
use crate::readiness::Status;
use crate::verify::{Check, Ctx, Reach, Verdict};

pub(super) struct Layers {
    pub objects: Vec<ObjectRef>,
}

impl Check for Layers {
    fn ids(&self) -> Vec<String> {
        vec!["flux.layers".into()]
    }

    /// Reading each Flux object ([`status_of`]).
    fn operations(&self, _: &Profile, _: &Reach) -> Vec<Operation> {
        self.objects.iter().map(|r| Operation::Get(Objects::Named(r.clone()))).collect()
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let mut bad = Vec::new();
            for r in &self.objects {
                match status_of(&ctx.cluster, r).await {
                    Ok((s, _)) if s.status == Status::Current => {}
                    Ok((s, _)) => bad.push(format!("{r}: {} ({})", s.status, s.message)),
                    Err(e) => return vec![Verdict::error(format!("reading {r}"), e.to_string())],
                }
            }
            let total = self.objects.len();
            vec![if bad.is_empty() {
                Verdict::pass(format!("{total}/{total} Flux objects Ready at their current generation"))
            } else {
                Verdict::fail(format!("{}/{total} Ready", total - bad.len()), bad.join("; "))
                    .with_fix("flux get all -A; flux reconcile <kind> <name> --with-source")
            }]
        })
    }
}
