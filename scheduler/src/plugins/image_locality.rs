//! ImageLocality: prefers nodes that already have the pod's images, weighted by image size
//! and by how few nodes have them (so one node does not attract every pod of an image).

use crate::cache::Cache;
use crate::framework::{CycleState, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, PreScore, Score};

pub const NAME: &str = "ImageLocality";
const MB: i64 = 1024 * 1024;
/// Below this much image already present, the score is 0 (upstream's `minThreshold`).
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, image bytes beyond this do not raise the score (`maxContainerThreshold`).
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

pub struct ImageLocality;

/// Per image of the pod: its normalized name and the fraction of nodes that have it.
#[derive(Clone, Default)]
struct Spread {
    images: Vec<(String, f64)>,
}

/// Upstream's `normalizedImageName`: an untagged, undigested image means `:latest`.
fn normalized(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last.contains(':') { image.to_owned() } else { format!("{image}:latest") }
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScore> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn Score> {
        Some(self)
    }
}

impl PreScore for ImageLocality {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, snapshot: &Cache, _nodes: &[&NodeInfo]) {
        let total = snapshot.node_count().max(1) as f64;
        let images = pod
            .images
            .iter()
            .map(|i| {
                let name = normalized(i);
                let spread = snapshot.nodes_with_image(&name) as f64 / total;
                (name, spread)
            })
            .collect();
        state.write(NAME, Spread { images });
    }
}

impl Score for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(spread) = state.read::<Spread>(NAME) else { return 0 };
        let sum: f64 = spread
            .images
            .iter()
            .filter_map(|(name, s)| node.images.get(name).map(|size| *size as f64 * s))
            .sum();
        let max = MAX_CONTAINER_THRESHOLD * pod.images.len().max(1) as i64;
        let sum = (sum as i64).clamp(MIN_THRESHOLD, max);
        MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn image_names_default_to_latest() {
        assert_eq!(super::normalized("busybox"), "busybox:latest");
        assert_eq!(super::normalized("localhost:5000/busybox"), "localhost:5000/busybox:latest");
        assert_eq!(super::normalized("busybox:1.36"), "busybox:1.36");
    }
}
