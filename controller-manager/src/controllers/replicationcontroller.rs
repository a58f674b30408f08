//! The ReplicationController controller (upstream `pkg/controller/replication`): the
//! ReplicaSet controller run over ReplicationControllers, as upstream does by adapting
//! them to ReplicaSets (see [`super::replicaset::ReplicaOwner`]). Their `scale`
//! subresource is served by the API server.

use k8s_openapi::api::core::v1::ReplicationController;

use crate::controller::{Context, Error};
use crate::controllers::replicaset::start_for;

pub fn start(ctx: &Context) -> Result<(), Error> {
    start_for::<ReplicationController>(ctx, ctx.options.concurrent_rc_syncs)
}
