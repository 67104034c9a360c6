//! Lists what an upstream offers (tools, resources, resource templates, prompts) when it
//! connects and again whenever it says a list changed. Every list is bounded
//! (`limits.max_upstream_list_items`), because an upstream that pages forever or lists
//! millions of items must not take the bridge's memory.

use std::{future::Future, sync::Arc, time::Duration};

use rmcp::{RoleClient, ServiceError, model::PaginatedRequestParams, service::Peer};

use super::{offer::ListKind, shared::Shared};

/// Time allowed for the MCP handshake and for one listing.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Page through a list with `page(cursor)`, keeping at most `cap` items. Returns the items and
/// whether the upstream had more (the rest is dropped, the caller counts it). A cursor that
/// comes back unchanged ends the listing too: a broken upstream must not loop the bridge.
pub(super) async fn list_bounded<T, F, Fut>(
    cap: usize,
    mut page: F,
) -> Result<(Vec<T>, bool), ServiceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    // Empty pages with fresh cursors would never reach `cap`: the pages are bounded too.
    for _ in 0..=cap {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (mut batch, next) = page(params).await?;
        if items.len() + batch.len() > cap {
            batch.truncate(cap - items.len());
            items.extend(batch);
            return Ok((items, true));
        }
        items.extend(batch);
        match next {
            Some(next) if Some(&next) != cursor.as_ref() && !next.is_empty() => cursor = Some(next),
            Some(next) if !next.is_empty() => return Ok((items, true)),
            _ => return Ok((items, false)),
        }
    }
    Ok((items, true))
}

/// List tools again (the upstream said they changed, or it connected).
pub(super) async fn refresh_tools(upstream: &Shared) {
    let Some(live) = upstream.live() else { return };
    let peer = live.peer.clone();
    let tools = list_bounded(upstream.limits.max_list_items, |p| {
        let peer = peer.clone();
        async move {
            let r = peer.list_tools(p).await?;
            Ok((r.tools, r.next_cursor))
        }
    });
    if let Some(tools) = listed(upstream, "tools", tools).await {
        upstream.details().tools = Arc::new(tools);
        upstream.list_changed(ListKind::Tools);
    }
}

/// Note what the upstream offers, from its `initialize` answer.
/// Also notes the revision the session runs at (what `protocol = "auto"` chose).
pub(super) fn learn_capabilities(upstream: &Shared, peer: &Peer<RoleClient>) {
    let info = peer.peer_info();
    let mut details = upstream.details();
    details.offer.capabilities = info.as_ref().map(|info| info.capabilities.clone());
    details.protocol = info.map(|info| info.protocol_version.to_string());
    let protocol = details.protocol.as_deref();
    upstream.routes.spans.learn_protocol(protocol);
}

/// List resources and templates again (the upstream said they changed, or it connected).
pub(super) async fn refresh_resources(upstream: &Shared) {
    let offers = upstream
        .capabilities()
        .is_some_and(|c| c.resources.is_some());
    let Some(live) = upstream.live() else { return };
    if !offers {
        let mut details = upstream.details();
        details.offer.resources = Arc::default();
        details.offer.templates = Arc::default();
        return;
    }
    let cap = upstream.limits.max_list_items;
    let peer = live.peer.clone();
    let resources = list_bounded(cap, |p| {
        let peer = peer.clone();
        async move {
            let r = peer.list_resources(p).await?;
            Ok((r.resources, r.next_cursor))
        }
    });
    if let Some(resources) = listed(upstream, "resources", resources).await {
        upstream.details().offer.resources = Arc::new(resources);
    }
    let templates = list_bounded(cap, |p| {
        let peer = peer.clone();
        async move {
            let r = peer.list_resource_templates(p).await?;
            Ok((r.resource_templates, r.next_cursor))
        }
    });
    if let Some(templates) = listed(upstream, "resource templates", templates).await {
        upstream.details().offer.templates = Arc::new(templates);
    }
    upstream.list_changed(ListKind::Resources);
}

/// List prompts again (the upstream said they changed, or it connected).
pub(super) async fn refresh_prompts(upstream: &Shared) {
    let offers = upstream.capabilities().is_some_and(|c| c.prompts.is_some());
    let Some(live) = upstream.live() else { return };
    if !offers {
        upstream.details().offer.prompts = Arc::default();
        return;
    }
    let peer = live.peer.clone();
    let prompts = list_bounded(upstream.limits.max_list_items, |p| {
        let peer = peer.clone();
        async move {
            let r = peer.list_prompts(p).await?;
            Ok((r.prompts, r.next_cursor))
        }
    });
    if let Some(prompts) = listed(upstream, "prompts", prompts).await {
        upstream.details().offer.prompts = Arc::new(prompts);
    }
    upstream.list_changed(ListKind::Prompts);
}

/// Await one bounded listing: the items, or `None` (logged) when it failed or timed out.
/// A list cut at the limit is counted and logged, and its first items are kept.
async fn listed<T>(
    upstream: &Shared,
    what: &str,
    listing: impl Future<Output = Result<(Vec<T>, bool), ServiceError>>,
) -> Option<Vec<T>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, listing).await {
        Ok(Ok((items, truncated))) => {
            if truncated {
                upstream
                    .metrics
                    .limit_hits
                    .with_label_values(&["max_upstream_list_items"])
                    .inc();
                tracing::warn!(upstream = %upstream.name(), list = what, kept = items.len(),
                    "the upstream lists more than limits.max_upstream_list_items: the rest is not offered; raise the limit if they are wanted");
            }
            tracing::debug!(upstream = %upstream.name(), list = what, count = items.len(), "listed");
            Some(items)
        }
        Ok(Err(e)) => {
            tracing::warn!(upstream = %upstream.name(), list = what, error = %e, "listing failed");
            None
        }
        Err(_) => {
            tracing::warn!(upstream = %upstream.name(), list = what, "listing timed out");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pages(cap: usize, pages: Vec<(Vec<u32>, Option<&'static str>)>) -> (Vec<u32>, bool) {
        let pages = std::sync::Mutex::new(pages.into_iter());
        list_bounded(cap, |_| {
            let next = pages.lock().unwrap().next().unwrap_or((vec![], None));
            async move { Ok((next.0, next.1.map(str::to_string))) }
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn pages_are_followed_and_cut_at_the_cap() {
        let all = pages(10, vec![(vec![1, 2], Some("a")), (vec![3], None)]).await;
        assert_eq!(all, (vec![1, 2, 3], false));
        let cut = pages(2, vec![(vec![1], Some("a")), (vec![2, 3], Some("b"))]).await;
        assert_eq!(cut, (vec![1, 2], true));
    }

    #[tokio::test]
    async fn a_repeated_cursor_ends_the_listing() {
        let looped = pages(
            100,
            vec![(vec![1], Some("a")), (vec![2], Some("a")), (vec![3], None)],
        )
        .await;
        assert_eq!(looped, (vec![1, 2], true));
    }
}
