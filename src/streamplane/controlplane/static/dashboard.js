// streamplane dashboard: reads the control plane's JSON API, no libraries, no build step.
// Views by URL fragment: #/ (fleet), #/streams/<name>, #/groups/<group>.
"use strict";

const REFRESH_MS = 2000;
const view = document.getElementById("view");
let timer = null;
let rendering = false;

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

async function get(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" } });
  if (!resp.ok) {
    let detail = resp.statusText;
    try { detail = (await resp.json()).detail; } catch (_) { /* not JSON */ }
    throw new Error(`${path}: ${resp.status} ${detail}`);
  }
  return resp.json();
}

function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function status(s) {
  return `<span class="status s-${esc(s)}">${esc(s)}</span>`;
}

function when(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : "–";
}

function table(headers, rows, empty) {
  if (!rows.length) return `<p class="muted">${esc(empty)}</p>`;
  const head = headers.map((h) => `<th>${esc(h)}</th>`).join("");
  return `<table><thead><tr>${head}</tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

const groupLink = (g) =>
  `<a class="group-link" data-group="${esc(g)}" href="#/groups/${encodeURIComponent(g)}">${esc(g)}</a>`;
const streamLink = (s) =>
  `<a class="stream-link" data-stream="${esc(s)}" href="#/streams/${encodeURIComponent(s)}">${esc(s)}</a>`;

function groupRows(groups) {
  return groups.map((g) => `<tr>
    <td>${groupLink(g.group)}</td><td>${esc(g.streams.join(", ") || "–")}</td>
    <td>${esc(g.clusters.join(", "))}</td><td class="num">${g.partitions}</td>
    <td class="num">${g.offset_lag}</td><td class="num">${seconds(g.max_time_lag_s)}</td>
    <td>${status(g.status)}</td></tr>`);
}

function dlqByStream(dlq) {
  const out = {};
  for (const d of dlq) out[d.stream] = (out[d.stream] || 0) + d.records;
  return out;
}

// ------------------------------------------------------------------ views
async function fleetView() {
  const [clusters, readers, streams, groups, dlq] = await Promise.all([
    get("/v1/clusters"), get("/v1/lag/readers"), get("/v1/streams"),
    get("/v1/groups"), get("/v1/lag/dlq"),
  ]);
  const byCluster = Object.fromEntries(readers.map((r) => [r.cluster, r]));
  const clusterRows = clusters.map((c) => {
    const r = byCluster[c.name];
    let health = "unknown";
    if (r) health = r.last_error && !r.caught_up ? "down" : r.caught_up ? "up" : "catching";
    const tags = Object.entries(c.tags).map(([k, v]) => `${k}=${v}`).join(", ");
    return `<tr><td>${esc(c.name)}</td><td>${esc(c.bootstrap)}</td><td>${esc(tags || "–")}</td>
      <td>${status(health)}</td><td class="num">${r ? r.commits_tracked : "–"}</td>
      <td class="muted">${esc(r && r.last_error ? r.last_error : "")}</td></tr>`;
  });
  const dlqCounts = dlqByStream(dlq);
  const streamRows = streams.map((s) => `<tr><td>${streamLink(s.name)}</td>
    <td>${esc(s.lanes.join(", "))}</td><td class="num">${s.epoch}</td>
    <td>${esc(s.active_clusters.join(", "))}</td><td class="num">${dlqCounts[s.name] || 0}</td></tr>`);
  return `
    <h2>Clusters</h2>
    ${table(["cluster", "bootstrap", "tags", "health", "commits tracked", ""], clusterRows, "no clusters registered")}
    <h2>Streams</h2>
    ${table(["stream", "lanes", "epoch", "active on", "dlq records"], streamRows, "no streams")}
    <h2>Groups</h2>
    ${table(["group", "streams", "clusters", "partitions", "offset lag", "time lag", "status"],
      groupRows(groups), "no committed offsets seen yet")}`;
}

async function streamView(name) {
  const q = encodeURIComponent(name);
  const [stream, audit, groups, dlq] = await Promise.all([
    get(`/v1/streams/${q}`), get(`/v1/audit?stream=${q}&limit=50`),
    get(`/v1/groups?stream=${q}`), get("/v1/lag/dlq"),
  ]);
  const segRows = stream.routing.segments.map((s) => `<tr><td>${esc(s.lane)}</td>
    <td>${esc(s.cluster)}</td><td>${esc(s.topic)}</td><td class="num">${s.partitions}</td>
    <td>${esc(s.state)}</td><td class="num">${s.epoch}</td></tr>`);
  const historyRows = audit.map((e) => {
    const d = e.detail || {};
    const what = [d.from_epoch !== undefined ? `epoch ${d.from_epoch} → ${d.to_epoch}` : "",
      d.cluster ? `to ${d.cluster}` : "", d.reason || ""].filter(Boolean).join(" · ");
    return `<tr><td>${esc(new Date(e.time).toLocaleString())}</td><td>${esc(e.action)}</td>
      <td>${esc(e.actor)}</td><td>${esc(what || JSON.stringify(d))}</td></tr>`;
  });
  const dlqRows = dlq.filter((d) => d.stream === name).map((d) =>
    `<tr><td>${esc(d.cluster)}</td><td>${esc(d.topic)}</td><td class="num">${d.records}</td></tr>`);
  return `
    <h2>Stream ${esc(name)} <span class="muted">epoch ${stream.epoch}</span></h2>
    ${table(["lane", "cluster", "topic", "partitions", "state", "epoch"], segRows, "no segments")}
    <h2>Groups</h2>
    ${table(["group", "streams", "clusters", "partitions", "offset lag", "time lag", "status"],
      groupRows(groups), "no group has committed on this stream yet")}
    <h2>Epoch history and failovers</h2>
    ${table(["time", "action", "actor", "detail"], historyRows, "no audit entries")}
    <h2>Dead letters</h2>
    ${table(["cluster", "topic", "records"], dlqRows, "no dlq records polled yet")}`;
}

async function groupView(group) {
  const q = encodeURIComponent(group);
  const [history, lag] = await Promise.all([
    get(`/v1/groups/${q}/lag/history`), get(`/v1/lag?group=${q}`),
  ]);
  const summary = lag.groups[0];
  const points = history.series.filter((p) => p[1] !== null).map((p) => [p[0], p[1]]);
  if (summary && summary.max_time_lag_s !== null) {
    const last = points.length ? points[points.length - 1][0] : 0;
    if (lag.now_ms > last) points.push([lag.now_ms, summary.max_time_lag_s]);
  }
  const rows = lag.partitions.map((p) => `<tr><td>${esc(p.cluster)}</td>
    <td>${p.stream ? streamLink(p.stream) : "–"}</td><td>${esc(p.lane || "–")}</td>
    <td>${esc(p.topic)}</td><td class="num">${p.partition}</td>
    <td class="num">${p.committed_offset ?? "–"}</td><td class="num">${p.end_offset ?? "–"}</td>
    <td class="num">${p.offset_lag ?? "–"}</td><td class="num">${seconds(p.time_lag_s)}</td>
    <td>${status(p.status)}</td><td>${when(p.last_commit_ms)}</td></tr>`);
  return `
    <h2>Group ${esc(group)} ${summary ? status(summary.status) : ""}
      <span class="muted">time lag ${seconds(summary ? summary.max_time_lag_s : null)},
      offset lag ${summary ? summary.offset_lag : "–"}</span></h2>
    <div id="lag-chart">${chart(points)}</div>
    <h2>Partitions</h2>
    ${table(["cluster", "stream", "lane", "topic", "partition", "committed", "end",
      "offset lag", "time lag", "status", "last commit"], rows, "no partitions")}`;
}

// ------------------------------------------------------------------ the chart (inline SVG)
function chart(points, width = 760, height = 260) {
  const pad = { l: 56, r: 16, t: 14, b: 30 };
  const w = width - pad.l - pad.r;
  const h = height - pad.t - pad.b;
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}"
    role="img" aria-label="time lag in seconds">`;
  if (!points.length) {
    return `${svg}<text class="label" x="${width / 2}" y="${height / 2}"
      text-anchor="middle">no lag samples yet</text></svg>`;
  }
  const t0 = points[0][0];
  const t1 = Math.max(points[points.length - 1][0], t0 + 1000);
  const ymax = Math.max(1, ...points.map((p) => p[1])) * 1.1;
  const x = (t) => pad.l + ((t - t0) / (t1 - t0)) * w;
  const y = (v) => pad.t + h - (v / ymax) * h;
  for (let i = 0; i <= 4; i++) {
    const v = (ymax * i) / 4;
    svg += `<line class="grid" x1="${pad.l}" x2="${pad.l + w}" y1="${y(v)}" y2="${y(v)}"/>`;
    svg += `<text class="label" x="${pad.l - 6}" y="${y(v) + 4}" text-anchor="end">${seconds(v)}</text>`;
  }
  svg += `<line class="axis" x1="${pad.l}" x2="${pad.l + w}" y1="${pad.t + h}" y2="${pad.t + h}"/>`;
  svg += `<text class="label" x="${pad.l}" y="${height - 8}">${esc(when(t0))}</text>`;
  svg += `<text class="label" x="${pad.l + w}" y="${height - 8}" text-anchor="end">${esc(when(t1))}</text>`;
  const d = points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
  const area = `${d} L${x(points[points.length - 1][0]).toFixed(1)},${pad.t + h} L${x(t0).toFixed(1)},${pad.t + h} Z`;
  svg += `<path class="area" d="${area}"/>`;
  svg += `<path class="series" data-points="${points.length}" d="${d}"/>`;
  for (const p of points) {
    svg += `<circle cx="${x(p[0]).toFixed(1)}" cy="${y(p[1]).toFixed(1)}" r="2.5" fill="#1f5fbf"/>`;
  }
  return `${svg}</svg>`;
}

// ------------------------------------------------------------------ routing and refresh
async function render() {
  if (rendering) return;
  rendering = true;
  const hash = location.hash.replace(/^#\/?/, "");
  const [kind, ...rest] = hash.split("/");
  const name = decodeURIComponent(rest.join("/"));
  try {
    let html;
    if (kind === "streams" && name) html = await streamView(name);
    else if (kind === "groups" && name) html = await groupView(name);
    else html = await fleetView();
    view.innerHTML = html;
    view.dataset.view = kind || "fleet";
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    view.innerHTML = `<p class="error">${esc(err.message)}</p>`;
  } finally {
    rendering = false;
  }
}

function schedule() {
  clearInterval(timer);
  timer = setInterval(render, REFRESH_MS);
}

window.addEventListener("hashchange", () => { render(); schedule(); });
render();
schedule();
