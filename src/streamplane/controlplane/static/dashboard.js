// streamplane dashboard: reads the control plane's JSON API, no libraries, no build step.
// Views by URL fragment: #/ (fleet), #/streams/<name>, #/groups/<group>.
"use strict";

const REFRESH_MS = 2000;
const view = document.getElementById("view");
let timer = null;
let rendering = false; // a render is awaiting the API
let again = false; // navigated while rendering: render once more

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

// A group's lag covers its partitions whose lag is known; the others are counted beside
// it (a group with partitions of unknown lag is not caught up as far as anyone knows).
// Partitions whose end offset is stale (not read at the last poll: a broker down, a
// leader moving) are in the offset lag at their last known end, a lower bound: counted
// beside it too, "5356 (2 stale)", and the whole marked (.stale, the age on hover).
// These return HTML.
function withNotes(known, unknown, stale = 0) {
  const notes = [[unknown, "unknown"], [stale, "stale"]].filter(([n]) => n)
    .map(([n, what]) => `${n} ${what}`);
  return notes.length ? `${known} (${notes.join(", ")})` : known;
}

function staleNote(n, age) {
  const old = age === null || age === undefined ? "" : `, up to ${seconds(age)} old`;
  return `${n} partition${n === 1 ? "" : "s"} stale: end offset not read at the last poll`
    + `${old}; the offset lag counts the last known end (a lower bound)`;
}

function groupOffsetLag(g) {
  const stale = g.stale_end_offsets || 0;
  const text = esc(withNotes(`${g.offset_lag}`, g.unknown_offset_lag, stale));
  if (!stale) return text;
  const title = esc(staleNote(stale, g.stale_end_offset_age_s));
  return `<span class="stale" data-stale="${stale}" title="${title}">${text}</span>`;
}

const groupTimeLag = (g) => esc(withNotes(seconds(g.max_time_lag_s), g.unknown_time_lag));

// A partition's end offset and offset lag: "1150 (stale 12.0 s)" when the end is stale.
function partitionEnd(p) {
  if (p.end_offset === null || p.end_offset === undefined) return "–";
  if (!p.end_offset_stale) return `${p.end_offset}`;
  const age = p.end_offset_age_s;
  const note = age === null || age === undefined ? "stale" : `stale ${seconds(age)}`;
  return `<span class="stale" title="end offset not read at the last poll: the last known one">`
    + `${p.end_offset} (${esc(note)})</span>`;
}

function partitionOffsetLag(p) {
  if (p.offset_lag === null || p.offset_lag === undefined) return "–";
  if (!p.end_offset_stale) return `${p.offset_lag}`;
  return `<span class="stale" title="counted from a stale end offset: a lower bound">`
    + `${p.offset_lag}</span>`;
}

function groupRows(groups) {
  return groups.map((g) => `<tr>
    <td>${groupLink(g.group)}</td><td>${esc(g.streams.join(", ") || "–")}</td>
    <td>${esc(g.clusters.join(", "))}</td><td class="num">${g.partitions}</td>
    <td class="num">${groupOffsetLag(g)}</td><td class="num">${groupTimeLag(g)}</td>
    <td>${status(g.status)}</td></tr>`);
}

// The control plane's health of a cluster (what its probes last showed): state, why and
// since when. "unknown" when nothing probes it (health checks off).
function clusterHealth(h) {
  const state = (h && h.state) || "unknown";
  if (state === "unknown") return { state, note: "not probed (health checks off)" };
  const notes = [];
  if (state !== "ok" && h.last_error) notes.push(h.last_error);
  if (h.since) notes.push(`${state} since ${when(Date.parse(h.since))}`);
  return { state, note: notes.join(" · ") };
}

// The __consumer_offsets reader's view of a cluster: detail, not its health (a reader
// caught up on a dead cluster only goes quiet).
function readerNote(r) {
  if (!r) return "no reader";
  const parts = [r.caught_up ? "caught up" : "catching up"];
  if (r.last_error) parts.push(r.last_error);
  return parts.join(" · ");
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
    const health = clusterHealth(c.health);
    const tags = Object.entries(c.tags).map(([k, v]) => `${k}=${v}`).join(", ");
    return `<tr data-cluster="${esc(c.name)}"><td>${esc(c.name)}</td><td>${esc(c.bootstrap)}</td>
      <td>${esc(tags || "–")}</td><td class="health">${status(health.state)}</td>
      <td class="health-note">${esc(health.note)}</td>
      <td class="num">${r ? r.commits_tracked : "–"}</td>
      <td class="reader muted">${esc(readerNote(r))}</td></tr>`;
  });
  const dlqCounts = dlqByStream(dlq);
  const streamRows = streams.map((s) => `<tr><td>${streamLink(s.name)}</td>
    <td>${esc(s.lanes.join(", "))}</td><td class="num">${s.epoch}</td>
    <td>${esc(s.active_clusters.join(", "))}</td><td class="num">${dlqCounts[s.name] || 0}</td></tr>`);
  return `
    <h2>Clusters</h2>
    ${table(["cluster", "bootstrap", "tags", "health", "", "commits tracked", "lag reader"],
      clusterRows, "no clusters registered")}
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
  const historyRows = audit.map((e) => `<tr data-action="${esc(e.action)}">
    <td>${esc(new Date(e.time).toLocaleString())}</td><td>${esc(e.action)}</td>
    <td>${esc(e.actor)}</td><td class="detail">${esc(auditDetail(e))}</td></tr>`);
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

// One audit entry in words. "to <cluster>" only when segments move to another cluster
// (a failover); a segment sealed, retired or lost stays where it is: "on <cluster>".
function auditDetail(e) {
  const d = e.detail || {};
  const what = [];
  if (d.from_epoch !== undefined) what.push(`epoch ${d.from_epoch} → ${d.to_epoch}`);
  else if (d.epoch !== undefined) what.push(`epoch ${d.epoch}`);
  if (e.action === "segment.transition") {
    what.push(`${d.topic || "segment"} ${d.state || "changed"} on ${d.cluster}`);
  } else if (d.cluster) {
    const from = [...new Set((d.draining || []).map((s) => s.cluster))];
    const moved = e.action === "stream.failover" && from.some((c) => c !== d.cluster);
    what.push(moved ? `${from.join(", ")} to ${d.cluster}` : `on ${d.cluster}`);
  }
  if (d.lanes && d.lanes.length) what.push(`lanes ${d.lanes.join(", ")}`);
  if (d.state && e.action !== "segment.transition") what.push(d.state);
  if (d.health) what.push(d.health);
  if (d.error) what.push(d.error);
  if (d.reason) what.push(d.reason);
  return what.length ? what.join(" · ") : JSON.stringify(d);
}

async function groupView(group) {
  const q = encodeURIComponent(group);
  const [history, lag] = await Promise.all([
    get(`/v1/groups/${q}/lag/history`), get(`/v1/lag?group=${q}`),
  ]);
  const summary = lag.groups[0];
  // [time ms, time lag s or null (unknown)]: the chart breaks its line at the nulls.
  const samples = history.series.map((p) => [p[0], p[1]]);
  if (summary && summary.max_time_lag_s !== null) {
    const last = samples.length ? samples[samples.length - 1][0] : 0;
    if (lag.now_ms > last) samples.push([lag.now_ms, summary.max_time_lag_s]);
  }
  const rows = lag.partitions.map((p) => `<tr${p.end_offset_stale ? ' class="stale-end"' : ""}>
    <td>${esc(p.cluster)}</td>
    <td>${p.stream ? streamLink(p.stream) : "–"}</td><td>${esc(p.lane || "–")}</td>
    <td>${esc(p.topic)}</td><td class="num">${p.partition}</td>
    <td class="num">${p.committed_offset ?? "–"}</td><td class="num">${partitionEnd(p)}</td>
    <td class="num">${partitionOffsetLag(p)}</td><td class="num">${seconds(p.time_lag_s)}</td>
    <td>${status(p.status)}</td><td>${when(p.last_commit_ms)}</td></tr>`);
  const stale = summary ? summary.stale_end_offsets || 0 : 0;
  const note = stale
    ? `<p class="stale-note">${esc(staleNote(stale, summary.stale_end_offset_age_s))}</p>` : "";
  return `
    <h2>Group ${esc(group)} ${summary ? status(summary.status) : ""}
      <span class="muted">time lag ${summary ? groupTimeLag(summary) : "–"},
      offset lag ${summary ? groupOffsetLag(summary) : "–"}</span></h2>
    ${note}
    <div id="lag-chart">${chart(samples)}</div>
    <h2>Partitions</h2>
    ${table(["cluster", "stream", "lane", "topic", "partition", "committed", "end",
      "offset lag", "time lag", "status", "last commit"], rows, "no partitions")}`;
}

// ------------------------------------------------------------------ the chart (inline SVG)
// Round steps for the y axis, in seconds: 1-2-5 below a minute, then minutes and hours
// that read well on a clock.
const STEPS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
  3600, 7200, 10800, 21600, 43200, 86400];

// The y axis for values up to `max`: the smallest round step that needs at most
// `most` intervals (with a little headroom above `max`), and the top.
function yAxis(max, most = 5) {
  const want = max * 1.05;
  let step = STEPS.find((s) => Math.ceil(want / s) <= most);
  if (step === undefined) {
    step = 86400;
    while (Math.ceil(want / step) > most) step *= 2;
  }
  return { step, top: step * Math.ceil(want / step) };
}

function tickLabel(v, step) {
  const [div, unit] = step >= 86400 ? [86400, "d"] : step >= 3600 ? [3600, "h"]
    : step >= 60 ? [60, "min"] : [1, "s"];
  return `${Number((v / div).toFixed(2))} ${unit}`;
}

// Runs of known samples: a sample whose value is null (time lag unknown) ends a run.
function runs(samples) {
  const out = [];
  let run = [];
  for (const p of samples) {
    if (p[1] === null || p[1] === undefined) {
      if (run.length) out.push(run);
      run = [];
    } else {
      run.push(p);
    }
  }
  if (run.length) out.push(run);
  return out;
}

// `samples`: [time ms, time lag s or null], in time order.
function chart(samples, width = 760, height = 260) {
  const pad = { l: 56, r: 16, t: 14, b: 30 };
  const w = width - pad.l - pad.r;
  const h = height - pad.t - pad.b;
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}"
    role="img" aria-label="time lag in seconds">`;
  const lines = runs(samples);
  const points = lines.flat();
  if (!points.length) {
    return `${svg}<text class="label" x="${width / 2}" y="${height / 2}"
      text-anchor="middle">no lag samples yet</text></svg>`;
  }
  const t0 = samples[0][0];
  const t1 = Math.max(samples[samples.length - 1][0], t0 + 1000);
  const { step, top } = yAxis(Math.max(1, ...points.map((p) => p[1])));
  const x = (t) => pad.l + ((t - t0) / (t1 - t0)) * w;
  const y = (v) => pad.t + h - (v / top) * h;
  const base = pad.t + h;
  for (let i = 0; i * step <= top + step / 1e6; i++) {
    const v = i * step;
    const yv = y(v).toFixed(1);
    svg += `<line class="grid" x1="${pad.l}" x2="${pad.l + w}" y1="${yv}" y2="${yv}"/>`;
    svg += `<text class="label ytick" data-value="${v}" x="${pad.l - 6}" y="${(y(v) + 4).toFixed(1)}"
      text-anchor="end">${esc(tickLabel(v, step))}</text>`;
  }
  svg += `<line class="axis" x1="${pad.l}" x2="${pad.l + w}" y1="${base}" y2="${base}"/>`;
  svg += `<text class="label" x="${pad.l}" y="${height - 8}">${esc(when(t0))}</text>`;
  svg += `<text class="label" x="${pad.l + w}" y="${height - 8}" text-anchor="end">${esc(when(t1))}</text>`;
  const xy = (p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`;
  const d = lines.map((run) => run.map((p, i) => `${i ? "L" : "M"}${xy(p)}`).join(" ")).join(" ");
  const area = lines.map((run) => `M${x(run[0][0]).toFixed(1)},${base} `
    + run.map((p) => `L${xy(p)}`).join(" ")
    + ` L${x(run[run.length - 1][0]).toFixed(1)},${base} Z`).join(" ");
  svg += `<path class="area" d="${area}"/>`;
  svg += `<path class="series" data-points="${points.length}" data-runs="${lines.length}" d="${d}"/>`;
  for (const p of points) {
    const [cx, cy] = xy(p).split(",");
    svg += `<circle cx="${cx}" cy="${cy}" r="2.5" fill="#1f5fbf"/>`;
  }
  return `${svg}</svg>`;
}

// ------------------------------------------------------------------ routing and refresh
// The view the fragment asks for: #/, #/streams/<name>, #/groups/<group>. The name is
// everything after the second "/", percent-decoded once (a group id may hold "/": the
// links send it as %2F). A malformed escape ("100%") is an error to show, not to throw.
function route(hash) {
  const path = hash.replace(/^#\/?/, "");
  const slash = path.indexOf("/");
  const kind = slash < 0 ? path : path.slice(0, slash);
  const raw = slash < 0 ? "" : path.slice(slash + 1);
  try {
    return { kind, name: decodeURIComponent(raw) };
  } catch (_) {
    const error = `bad address ${hash}: "${raw}" is not a valid percent-encoded name`;
    return { kind, name: null, error };
  }
}

async function viewFor(r) {
  if (r.error) throw new Error(r.error);
  if (r.kind === "streams" && r.name) return streamView(r.name);
  if (r.kind === "groups" && r.name) return groupView(r.name);
  return fleetView();
}

// One render at a time. A navigation meanwhile renders again when it ends (a refresh
// tick meanwhile is skipped), and what was fetched for a fragment left meanwhile is
// dropped. Nothing here may leave `rendering` set: the page would freeze.
async function render(navigated = false) {
  if (rendering) {
    if (navigated) again = true;
    return;
  }
  rendering = true;
  try {
    do {
      again = false;
      const hash = location.hash;
      let html;
      let kind;
      try {
        const r = route(hash);
        kind = r.error ? "error" : r.kind || "fleet";
        html = await viewFor(r);
      } catch (err) {
        kind = "error";
        html = `<p class="error">${esc(err && err.message ? err.message : err)}</p>`;
      }
      if (location.hash !== hash) {
        again = true; // navigated while fetching: render the new fragment instead
        continue;
      }
      view.innerHTML = html;
      view.dataset.view = kind;
      if (kind !== "error") {
        document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
      }
    } while (again);
  } finally {
    rendering = false;
  }
}

function schedule() {
  clearInterval(timer);
  timer = setInterval(render, REFRESH_MS);
}

window.addEventListener("hashchange", () => { render(true); schedule(); });
render();
schedule();
