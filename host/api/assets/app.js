// vigil's status page: one module, no dependency, no build step.
//
// It reads the REST API only (never waiting on a probe) and follows /api/v1/events for
// live changes. Every value that comes from the API is rendered as text through DOM APIs:
// cluster names, reasons and plugin messages come from outside and are never parsed as
// markup. The API token, when the server asks for one, lives in this tab's session storage
// and travels in the Authorization header only, never in a URL.

const PAGE_SIZE = 100;
const FIRST_PAGE = 100;
const LIST_PAGE = 1000;
const TOKEN_KEY = 'vigil-token';
const STATUSES = ['ONLINE', 'OFFLINE', 'UNKNOWN'];
const CONDITIONS = ['reference-broken', 'not-probeable', 'credentials-rejected', 'probe-stale',
  'probing-disabled', 'drain-blocked'];
const SORTS = { name: 'Name', status: 'Status', reason: 'Reason', probe: 'Last probe', plugin: 'Plugin' };
const RECENT = 30;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  clusters: new Map(),
  listComplete: false,
  loadedOnce: false,
  apps: [],
  plugins: [],
  summary: null,
  brake: { holding: false, since: null, detail: null, suppressed: [], count: 0 },
  notifications: null,
  recent: [],
  lastEventId: null,
  filter: { status: '', condition: '', label: '', text: '' },
  sort: { key: 'name', dir: 1 },
  page: 0,
  view: null,
  generation: 0,
};

class Unauthorized extends Error {}

// ---- the API ----------------------------------------------------------------------------

function headers(extra) {
  const h = { Accept: 'application/json', ...extra };
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

// GET a JSON document; `null` for a 404 when `optional` (an endpoint this vigil lacks, a
// cluster deleted meanwhile).
async function get(path, { optional = false, accept = [] } = {}) {
  const response = await fetch(path, { headers: headers(), cache: 'no-store', credentials: 'omit' });
  if (response.status === 401) throw new Unauthorized(path);
  if (response.status === 404 && optional) return null;
  if (!response.ok && !accept.includes(response.status)) {
    let detail = '';
    try { detail = (await response.json()).detail || ''; } catch { /* not a problem document */ }
    throw new Error(`${path}: ${response.status} ${detail}`.trim());
  }
  return response.json();
}

const enc = encodeURIComponent;

// ---- DOM helpers --------------------------------------------------------------------------

// h('tag', {attributes}, children…): an element; strings become text nodes, never markup.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

function clusterHref(name) { return `#/cluster/${enc(name)}`; }

function statusBadge(status) {
  const s = STATUSES.includes(status) ? status : 'UNKNOWN';
  return h('span', { class: `status status-${s.toLowerCase()}`, 'data-status': s }, status || 'UNKNOWN');
}

function appBadge(status) {
  const known = ['PENDING', 'DEPLOYED', 'DEGRADED', 'FAILED'].includes(status);
  return h('span', { class: `status app-${known ? status.toLowerCase() : 'pending'}`, 'data-status': status }, status);
}

function age(iso, now = Date.now()) {
  if (!iso) return 'never';
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 90) return `${seconds} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 129600) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

// A <time> whose text the clock keeps current ("12 s ago").
function ageTime(iso) {
  return h('time', { datetime: iso || undefined, 'data-age': iso || '', title: iso || undefined }, age(iso));
}

function duration(ms) {
  const s = Math.round(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function localTime(iso) {
  return iso ? h('time', { datetime: iso, title: iso }, new Date(iso).toLocaleString()) : 'never';
}

function tickAges() {
  const now = Date.now();
  for (const el of document.querySelectorAll('time[data-age]')) {
    const text = age(el.dataset.age || null, now);
    if (el.textContent !== text) el.textContent = text;
  }
}

// ---- the fleet ------------------------------------------------------------------------------

function probedBy(c) {
  const by = c.last_probed_by;
  if (by) return `${by.plugin} (gen ${by.generation})`;
  return c.plugin || '—';
}

function reasonText(c) {
  if (!c.reason && !c.reason_class) return c.last_outcome || '';
  return [c.reason_class, c.reason].filter(Boolean).join(': ');
}

function matches(c, f) {
  if (f.status && c.status !== f.status) return false;
  if (f.condition && !c.conditions.some((k) => k.type === f.condition)) return false;
  if (f.label) {
    const [key, value] = f.label.split('=');
    const have = c.labels ? c.labels[key.trim()] : undefined;
    if (have === undefined) return false;
    if (value !== undefined && value.trim() !== '' && have !== value.trim()) return false;
  }
  if (f.text) {
    const text = f.text.toLowerCase();
    const hay = [c.name, c.endpoint, c.reason || '', c.reason_class || '', probedBy(c),
      ...Object.entries(c.labels || {}).map(([k, v]) => `${k}=${v}`)].join('\n').toLowerCase();
    if (!hay.includes(text)) return false;
  }
  return true;
}

const RANK = { OFFLINE: 0, UNKNOWN: 1, ONLINE: 2 };
function sorter(key, dir) {
  const by = {
    name: (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
    status: (a, b) => (RANK[a.status] ?? 3) - (RANK[b.status] ?? 3),
    reason: (a, b) => reasonText(a).localeCompare(reasonText(b)),
    probe: (a, b) => (Date.parse(a.last_probe || 0) || 0) - (Date.parse(b.last_probe || 0) || 0),
    plugin: (a, b) => probedBy(a).localeCompare(probedBy(b)),
  }[key];
  return (a, b) => dir * by(a, b) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
}

function fleetRows() {
  const rows = [];
  for (const c of state.clusters.values()) if (matches(c, state.filter)) rows.push(c);
  rows.sort(sorter(state.sort.key, state.sort.dir));
  return rows;
}

function clusterRow(c) {
  const conditions = c.conditions.map((k) =>
    h('span', { class: `badge cond-${k.type}`, title: `${k.reason}: ${k.message}` }, k.type));
  return h('tr', { 'data-cluster': c.name, 'data-status': c.status },
    h('th', { scope: 'row' }, h('a', { href: clusterHref(c.name) }, c.name)),
    h('td', {}, statusBadge(c.status)),
    h('td', { class: 'reason' },
      c.reason_class ? h('span', { class: 'badge reason-class' }, c.reason_class) : null,
      c.reason ? h('span', { class: 'message' }, c.reason) : (c.reason_class ? null : c.last_outcome || '')),
    h('td', {}, ageTime(c.last_probe)),
    h('td', {}, probedBy(c)),
    h('td', { class: 'conditions' }, conditions.length ? conditions : '—'));
}

function fleetView() {
  const counts = h('ul', { class: 'counts', 'aria-label': 'Clusters per status' });
  const groups = h('div', { class: 'groups' });
  const statusSel = h('select', { id: 'f-status' }, h('option', { value: '' }, 'any'),
    STATUSES.map((s) => h('option', { value: s }, s)));
  const condSel = h('select', { id: 'f-condition' }, h('option', { value: '' }, 'any'),
    CONDITIONS.map((s) => h('option', { value: s }, s)));
  const labelIn = h('input', { id: 'f-label', type: 'text', placeholder: 'key=value', autocomplete: 'off' });
  const textIn = h('input', { id: 'f-text', type: 'search', placeholder: 'name, reason, endpoint…', autocomplete: 'off' });
  statusSel.value = state.filter.status;
  condSel.value = state.filter.condition;
  labelIn.value = state.filter.label;
  textIn.value = state.filter.text;
  const onFilter = () => {
    Object.assign(state.filter, { status: statusSel.value, condition: condSel.value,
      label: labelIn.value.trim(), text: textIn.value.trim() });
    state.page = 0;
    renderFleet();
  };
  for (const el of [statusSel, condSel]) el.addEventListener('change', onFilter);
  for (const el of [labelIn, textIn]) el.addEventListener('input', onFilter);
  const filters = h('form', { class: 'filters', role: 'search', onsubmit: (e) => e.preventDefault() },
    h('label', { for: 'f-status' }, 'Status'), statusSel,
    h('label', { for: 'f-condition' }, 'Condition'), condSel,
    h('label', { for: 'f-label' }, 'Label'), labelIn,
    h('label', { for: 'f-text' }, 'Search'), textIn);
  const head = h('tr', {}, Object.entries(SORTS).map(([key, title]) => {
    const button = h('button', { type: 'button', class: 'sort', 'data-sort': key,
      onclick: () => {
        state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 };
        renderFleet();
      } }, title);
    return h('th', { scope: 'col', 'data-key': key }, button);
  }), h('th', { scope: 'col' }, 'Conditions'));
  const tbody = h('tbody');
  const table = h('table', { id: 'fleet', class: 'fleet' },
    h('caption', { class: 'visually-hidden' }, 'Clusters'), h('thead', {}, head), tbody);
  const info = h('p', { class: 'page-info', 'aria-live': 'polite' });
  const prev = h('button', { type: 'button', onclick: () => { state.page -= 1; renderFleet(); } }, 'Previous page');
  const next = h('button', { type: 'button', onclick: () => { state.page += 1; renderFleet(); } }, 'Next page');
  const recent = h('ol', { class: 'recent', id: 'recent' });
  const main = document.getElementById('main');
  replace(main,
    h('h1', {}, 'Fleet'),
    counts, groups, filters,
    h('div', { class: 'table-wrap' }, table),
    h('nav', { class: 'pager', 'aria-label': 'Pages of clusters' }, prev, info, next),
    h('section', { 'aria-labelledby': 'recent-title' },
      h('h2', { id: 'recent-title' }, 'Recent events'), recent));
  state.view = { kind: 'fleet', counts, groups, tbody, table, info, prev, next, head, recent };
  renderFleet();
  renderRecent();
}

function renderFleet() {
  const v = state.view;
  if (!v || v.kind !== 'fleet') return;
  let per = { ONLINE: 0, OFFLINE: 0, UNKNOWN: 0 };
  for (const c of state.clusters.values()) per[c.status] = (per[c.status] || 0) + 1;
  // While the list is still loading, the summary (when this vigil has it) counts the whole fleet.
  if (!state.listComplete && state.summary && state.summary.statuses) per = state.summary.statuses;
  replace(v.counts, STATUSES.map((s) => h('li', {},
    h('button', { type: 'button', class: `count status-${s.toLowerCase()}`, 'data-count': s,
      'aria-pressed': String(state.filter.status === s),
      onclick: () => {
        state.filter.status = state.filter.status === s ? '' : s;
        document.getElementById('f-status').value = state.filter.status;
        state.page = 0;
        renderFleet();
      } }, `${s} `, h('strong', {}, String(per[s] || 0))))),
  h('li', { class: 'total' }, `${state.clusters.size} clusters${state.listComplete ? '' : ' (loading…)'}`));
  renderGroups(v.groups);
  for (const th of v.head.children) {
    const key = th.dataset.key;
    if (!key) continue;
    th.setAttribute('aria-sort', state.sort.key === key ? (state.sort.dir > 0 ? 'ascending' : 'descending') : 'none');
  }
  const rows = fleetRows();
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  state.page = Math.min(Math.max(0, state.page), pages - 1);
  const start = state.page * PAGE_SIZE;
  const shown = rows.slice(start, start + PAGE_SIZE);
  replace(v.tbody, shown.length ? shown.map(clusterRow)
    : h('tr', {}, h('td', { colspan: '6', class: 'empty' },
      state.loadedOnce ? 'No cluster matches.' : 'Loading…')));
  v.info.textContent = rows.length
    ? `Clusters ${start + 1}–${start + shown.length} of ${rows.length} (page ${state.page + 1} of ${pages})`
    : 'No cluster';
  v.prev.disabled = state.page === 0;
  v.next.disabled = state.page >= pages - 1;
  if (state.loadedOnce && !v.table.hasAttribute('data-rows-rendered')) {
    v.table.setAttribute('data-rows-rendered', String(shown.length));
    performance.mark('vigil-rows-rendered');
  } else if (state.loadedOnce) {
    v.table.setAttribute('data-rows-rendered', String(shown.length));
  }
}

// Counts per label (`/api/v1/summary`, on a vigil that has it): the groups with the most
// OFFLINE clusters first; a label's button filters the table by it.
function renderGroups(el) {
  const groups = state.summary && Array.isArray(state.summary.labels) ? [...state.summary.labels] : [];
  if (!groups.length) { el.replaceChildren(); return; }
  groups.sort((a, b) => (b.statuses.OFFLINE - a.statuses.OFFLINE) || (b.clusters - a.clusters));
  const shown = groups.slice(0, 20);
  replace(el, h('table', { class: 'groups-table', id: 'label-groups' },
    h('caption', {}, groups.length > shown.length ? `Per label (${shown.length} of ${groups.length})` : 'Per label'),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Label'), h('th', { scope: 'col' }, 'Clusters'),
      STATUSES.map((s) => h('th', { scope: 'col' }, s)))),
    h('tbody', {}, shown.map((g) => h('tr', { 'data-label': `${g.key}=${g.value}` },
      h('th', { scope: 'row' }, h('button', { type: 'button', class: 'link',
        onclick: () => {
          state.filter.label = `${g.key}=${g.value}`;
          document.getElementById('f-label').value = state.filter.label;
          state.page = 0;
          renderFleet();
        } }, `${g.key}=${g.value}`)),
      h('td', {}, String(g.clusters)),
      STATUSES.map((s) => h('td', {}, String(g.statuses[s] ?? 0))))))));
}

function describe(event) {
  const d = event.detail || {};
  switch (event.kind) {
    case 'status-changed': return `${d.from} → ${d.to}`;
    case 'failure-counted': return `failure ${d.count} of ${d.threshold} (${d.class})`;
    case 'failure-not-counted': return `failure not counted (${d.why}, ${d.class})`;
    case 'condition-set': return d.condition ? `condition ${d.condition.type || d.condition.kind} set: ${d.condition.reason}` : 'condition set';
    case 'condition-cleared': return `condition ${d.kind} cleared`;
    case 'apps-degraded': return `${appList(d)} degraded`;
    case 'apps-restored': return `${appList(d)} restored (outage ${d.outage})`;
    case 'brake-engaged': return `brake engaged: ${d.failed} of ${d.considered} clusters failed`;
    case 'brake-released': return 'brake released';
    default: return event.kind;
  }
}

function eventItem(event) {
  return h('li', { 'data-kind': event.kind, 'data-event-id': event.id },
    localTime(event.at), ' ',
    event.cluster ? h('a', { href: clusterHref(event.cluster) }, event.cluster) : null,
    event.cluster ? ' ' : null,
    h('span', { class: 'badge' }, event.kind), ' ', describe(event),
    event.actor ? ` by ${event.actor}` : null);
}

function renderRecent() {
  const v = state.view;
  if (!v || v.kind !== 'fleet') return;
  replace(v.recent, state.recent.length ? state.recent.map(eventItem) : h('li', {}, 'None since this page opened.'));
}

// ---- one cluster ----------------------------------------------------------------------------

function dl(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// The apps of a cascade: their names (recorded with the event), else how many.
function appList(d) {
  if (Array.isArray(d.app_names) && d.app_names.length) return d.app_names.join(', ');
  return `${(d.apps || []).length} app(s)`;
}

// The outages of a history (newest first): each opened by a transition to OFFLINE and
// closed by the transition back, with the apps it degraded and restored.
function outages(events) {
  const byId = new Map();
  for (const e of [...events].reverse()) {
    if (e.outage === null || e.outage === undefined) continue;
    const o = byId.get(e.outage) || { id: e.outage, opened: null, closed: null, degraded: [], restored: [] };
    const d = e.detail || {};
    if (e.kind === 'status-changed' && d.to === 'OFFLINE') o.opened = e.at;
    if (e.kind === 'status-changed' && d.from === 'OFFLINE') o.closed = e.at;
    if (e.kind === 'apps-degraded') o.degraded.push(appList(d));
    if (e.kind === 'apps-restored') { o.restored.push(appList(d)); o.closed = o.closed || e.at; }
    byId.set(e.outage, o);
  }
  return [...byId.values()].reverse();
}

async function clusterView(name) {
  const main = document.getElementById('main');
  const generation = state.generation;
  const [cluster, history, findings, apps, uptime, latency] = await Promise.all([
    get(`/api/v1/clusters/${enc(name)}`, { optional: true }),
    get(`/api/v1/clusters/${enc(name)}/history?limit=200`, { optional: true }),
    get(`/api/v1/clusters/${enc(name)}/findings`, { optional: true }).catch(() => null),
    get(`/api/v1/apps?cluster=${enc(name)}`, { optional: true }).catch(() => []),
    get(`/api/v1/clusters/${enc(name)}/uptime`, { optional: true }).catch(() => null),
    get(`/api/v1/clusters/${enc(name)}/latency`, { optional: true }).catch(() => null),
  ]);
  // A refresh of the cluster left (its events keep coming) may finish after the route moved
  // on, with the same generation: it must not draw that cluster over the one navigated to.
  if (generation !== state.generation || routedCluster() !== name) return;
  if (!cluster) {
    replace(main, h('h1', {}, name), h('p', {}, 'No such cluster (it may have been deleted).'),
      h('p', {}, h('a', { href: '#/' }, 'Back to the fleet')));
    state.view = { kind: 'cluster', name };
    return;
  }
  state.clusters.set(cluster.name, cluster);
  const events = history ? history.items : [];
  const outs = outages(events);
  const now = Date.now();
  const p = cluster.policy;
  replace(main,
    h('p', {}, h('a', { href: '#/' }, '← Fleet')),
    h('h1', {}, cluster.name, ' ', statusBadge(cluster.status)),
    cluster.reason || cluster.reason_class
      ? h('p', { class: 'reason', id: 'cluster-reason' }, reasonText(cluster)) : null,
    dl([
      ['Endpoint', cluster.endpoint],
      ['Reference', cluster.reference],
      ['Source', cluster.source],
      ['Last outcome', cluster.last_outcome || 'none yet'],
      ['Last probe', ageTime(cluster.last_probe)],
      ['Last success', cluster.last_success ? localTime(cluster.last_success) : 'never'],
      ['Next due', localTime(cluster.next_due)],
      ['Plugin', probedBy(cluster)],
      ['Failures in a row', String(cluster.counters.consecutive_failures)],
      ['Labels', Object.keys(cluster.labels).length
        ? Object.entries(cluster.labels).map(([k, v]) => h('span', { class: 'badge' }, `${k}=${v}`)) : '—'],
    ]),
    h('h2', {}, 'Conditions'),
    cluster.conditions.length ? h('ul', { class: 'conditions-list' }, cluster.conditions.map((k) =>
      h('li', {}, h('span', { class: `badge cond-${k.type}` }, k.type), ` ${k.reason}: ${k.message} (since `,
        localTime(k.since), ')'))) : h('p', {}, 'None.'),
    chartsSection(uptime, latency),
    h('h2', {}, 'Apps'),
    apps && apps.length ? h('table', { id: 'apps' },
      h('thead', {}, h('tr', {}, ['App', 'Status', 'Degraded by outage'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, apps.map((a) => h('tr', { 'data-app': a.name },
        h('th', { scope: 'row' }, a.name), h('td', {}, appBadge(a.status)),
        h('td', {}, a.degraded_by_outage ? `outage ${a.degraded_by_outage}` : '—')))))
      : h('p', {}, 'No app is deployed on this cluster.'),
    h('h2', {}, 'Outages'),
    outs.length ? h('table', { id: 'outages' },
      h('thead', {}, h('tr', {}, ['Outage', 'Opened', 'Closed', 'Duration', 'Apps degraded', 'Apps restored']
        .map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, outs.map((o) => h('tr', { 'data-outage': o.id, 'data-open': String(!o.closed) },
        h('th', { scope: 'row' }, `#${o.id}`), h('td', {}, localTime(o.opened)),
        h('td', {}, o.closed ? localTime(o.closed) : 'open'),
        h('td', {}, o.opened ? duration((o.closed ? Date.parse(o.closed) : now) - Date.parse(o.opened))
          + (o.closed ? '' : ' so far') : '—'),
        h('td', {}, o.degraded.join('; ') || '—'), h('td', {}, o.restored.join('; ') || '—')))))
      : h('p', {}, 'No outage in the history shown.'),
    h('h2', {}, 'Timeline'),
    events.length ? h('ol', { class: 'timeline', id: 'timeline' }, events.map(eventItem))
      : h('p', {}, 'No event yet.'),
    findingsSection(findings),
    h('h2', {}, 'Policy in force'),
    dl([
      ['Interval', `${p.interval_seconds} s`], ['Timeout', `${p.timeout_seconds} s`],
      ['Failure threshold', String(p.failure_threshold)], ['Success threshold', String(p.success_threshold)],
      ['Start period', `${p.start_period_seconds} s`], ['Auth failures count', p.count_auth_failures ? 'yes' : 'no'],
      ['Probing', p.disabled ? 'disabled' : 'enabled'],
    ]),
  );
  state.view = { kind: 'cluster', name: cluster.name };
}

function findingsSection(audit) {
  const title = h('h2', {}, 'Drain findings');
  if (!audit) return [title, h('p', {}, 'No audit.')];
  return [title,
    h('p', {}, audit.audited_at ? ['Audited ', localTime(audit.audited_at), `: ${audit.blocking} blocking.`] : 'Not audited yet.'),
    audit.last_failure ? h('p', { class: 'error' }, `Last audit failed: ${audit.last_failure.message}`) : null,
    audit.findings.length ? h('ul', { class: 'findings', id: 'findings' }, audit.findings.map((f) => h('li', {},
      h('span', { class: `badge sev-${f.severity}` }, f.severity), ' ', h('code', {}, f.code), ' ',
      f.objects.map((o) => `${o.kind} ${o.namespace ? `${o.namespace}/` : ''}${o.name}`).join(', '),
      h('p', {}, f.message), h('p', { class: 'fix' }, h('strong', {}, 'Fix: '), f.fix)))) : null];
}

// A small line chart of [x, y] points as inline SVG (built with DOM APIs).
function sparkline(points, label, format) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  const W = 300;
  const H = 60;
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', 'chart');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  if (points.length < 1) return svg;
  // One point (one day, one bucket) draws as a level line.
  if (points.length === 1) points = [[points[0][0] - 1, points[0][1]], points[0]];
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(0, ...ys), Math.max(...ys, 1e-9)];
  const px = (x) => (x1 === x0 ? W / 2 : ((x - x0) / (x1 - x0)) * (W - 4) + 2);
  const py = (y) => H - 2 - ((y - y0) / (y1 - y0)) * (H - 4);
  const path = document.createElementNS(ns, 'polyline');
  path.setAttribute('points', points.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(' '));
  path.setAttribute('class', 'line');
  svg.append(path);
  const title = document.createElementNS(ns, 'title');
  title.textContent = `${label}: latest ${format(ys[ys.length - 1])}`;
  svg.append(title);
  return svg;
}

// The uptime and latency series, whatever this vigil names their fields: an array of
// buckets, each with a time and a number.
function series(doc, names) {
  if (!doc) return [];
  const list = Array.isArray(doc) ? doc : (doc.buckets || doc.items || doc.series || doc.points || []);
  const out = [];
  for (const b of list) {
    if (!b || typeof b !== 'object') continue;
    const t = Date.parse(b.start || b.date || b.from || b.at || '');
    const key = names.find((n) => typeof b[n] === 'number');
    if (!Number.isNaN(t) && key) out.push([t, b[key]]);
  }
  return out;
}

function chartsSection(uptime, latency) {
  if (!uptime && !latency) return null;
  const parts = [h('h2', {}, 'Uptime and latency')];
  if (uptime) {
    const windows = (uptime.windows || []).map((w) => `${w.window}: ${typeof w.uptime_percent === 'number'
      ? `${w.uptime_percent.toFixed(2)} %` : 'no data'}`);
    const pts = series(uptime.days, ['uptime_percent']);
    parts.push(h('figure', { id: 'uptime' },
      h('figcaption', {}, `Uptime (ONLINE of the time watched ONLINE or OFFLINE) — ${windows.join(', ')}; per day:`),
      sparkline(pts, 'Uptime per day', (y) => `${y.toFixed(2)} %`)));
  }
  if (latency) {
    const pts = series(latency.buckets, ['mean_ms']);
    const last = latency.buckets && latency.buckets.length ? latency.buckets[latency.buckets.length - 1] : null;
    parts.push(h('figure', { id: 'latency' }, h('figcaption', {}, `Probe latency, mean per ${
      Math.round((latency.bucket_seconds || 300) / 60)} min${last ? ` (latest ${Math.round(last.mean_ms)} ms, max ${last.max_ms} ms)` : ': no probe yet'}`),
    sparkline(pts, 'Mean probe latency over time', (y) => `${Math.round(y)} ms`)));
  }
  return parts;
}

// ---- plugins --------------------------------------------------------------------------------

// A probation's progress: probes judged out of its length, inconclusive out of those allowed.
function probationProgress(pr) {
  const text = `${pr.judged} of ${pr.probes} probes judged, ${pr.inconclusive} inconclusive ` +
    `(${pr.max_inconclusive} allowed)`;
  return h('span', {}, h('progress', { max: String(pr.probes), value: String(pr.judged), 'aria-label': 'probation progress' }), ' ', text);
}

function pluginsView() {
  const main = document.getElementById('main');
  replace(main, h('h1', {}, 'Plugins'), state.plugins.length ? h('table', { id: 'plugins' },
    h('thead', {}, h('tr', {}, ['Plugin', 'State', 'Generation', 'Version', 'Source', 'Probes / faults',
      'Probation', 'Last refusal'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, state.plugins.map((p) => h('tr', { 'data-plugin': p.name, 'data-state': p.state },
      h('th', { scope: 'row' }, p.name, p.world ? h('span', { class: 'muted' }, ` (${p.world})`) : null),
      h('td', {}, h('span', { class: `badge plugin-${p.state}` }, p.state)),
      h('td', {}, p.generation ? String(p.generation) : '—',
        p.previous_generation ? ` (previous ${p.previous_generation})` : null,
        p.candidate_generation ? ` (checking ${p.candidate_generation})` : null),
      h('td', {}, p.version || '—'),
      h('td', { class: p.source && p.source !== 'embedded' ? 'path' : undefined }, p.source || '—'),
      h('td', {}, `${p.probes} / ${p.faults}`),
      h('td', { class: 'probation' }, p.probation
        ? probationProgress(p.probation) : '—'),
      h('td', { class: 'failure' }, p.last_failure ? [
        h('span', { class: 'badge' }, `stage ${p.last_failure.stage}`), ' ',
        h('span', { class: 'message' }, p.last_failure.message), ' ',
        h('span', { class: 'path' }, p.last_failure.file), ' (generation ', String(p.last_failure.generation),
        ', ', localTime(p.last_failure.at), ')'] : '—'))))) : h('p', {}, 'No plugin is loaded.'));
  state.view = { kind: 'plugins' };
}

// ---- the brake banner -------------------------------------------------------------------------

function renderBrake() {
  const el = document.getElementById('brake');
  const b = state.brake;
  if (!b.holding) { el.hidden = true; el.replaceChildren(); return; }
  el.hidden = false;
  replace(el,
    h('h2', {}, 'The mass-failure brake holds'),
    h('p', {}, 'Nearly every cluster failed at once, which more likely means vigil is cut off. ' +
      'While the brake holds, failures are not counted: no cluster goes OFFLINE and no app is degraded.',
    b.since ? [' Engaged ', localTime(b.since), '.'] : null,
    b.detail ? ` ${b.detail.failed} of ${b.detail.considered} clusters failed.` : null),
    h('p', { id: 'brake-count' }, `Failures suppressed since this page opened: ${b.count}, ` +
      `on ${b.suppressed.length}${b.suppressed.length === 100 ? '+' : ''} clusters (latest first):`),
    b.suppressed.length ? h('ul', { class: 'suppressed' }, b.suppressed.slice(0, 20).map((s) =>
      h('li', {}, h('a', { href: clusterHref(s.cluster) }, s.cluster), ` ${s.class} at `, localTime(s.at)))) : null);
}

// ---- the notification sinks (from /readyz) ---------------------------------------------------

function renderNotifications() {
  const el = document.getElementById('notify');
  const n = state.notifications;
  const failing = n ? n.sinks.filter((s) => s.failing) : [];
  const lost = n ? n.sinks.filter((s) => s.dead_letters > 0) : [];
  if (!n || (!failing.length && !lost.length && !n.config_error)) { el.hidden = true; el.replaceChildren(); return; }
  el.hidden = false;
  replace(el,
    failing.length ? h('h2', {}, 'Notifications are not getting through') : null,
    failing.length ? h('ul', { class: 'sinks' }, failing.map((s) => h('li', { 'data-sink': s.name },
      `${s.name} (${s.kind}): ${s.attempts} failed attempts in a row`,
      s.last_error ? ` — ${s.last_error}` : null,
      '. They are kept and sent once it answers.'))) : null,
    lost.length ? h('h2', {}, 'Notifications passed over undelivered') : null,
    lost.length ? h('ul', { class: 'dead-letters' }, lost.map((s) => h('li', { 'data-sink': s.name },
      `${s.name} (${s.kind}): ${s.dead_letters} not delivered and not sent again`,
      s.last_dead_letter ? ` — the last, ${s.last_dead_letter}` : null,
      '. The ones after them were sent.'))) : null,
    n.config_error ? h('p', { id: 'notify-config-error' },
      'The notifications file read again was refused, the previous one stays in force: ',
      n.config_error) : null);
}

// ---- loading and live updates ------------------------------------------------------------------

async function loadClusters() {
  document.getElementById('error').hidden = true;
  let after = null;
  let first = true;
  const seen = new Set();
  for (;;) {
    const limit = first ? FIRST_PAGE : LIST_PAGE;
    const page = await get(`/api/v1/clusters?limit=${limit}${after ? `&after=${enc(after)}` : ''}`);
    for (const c of page.items) { state.clusters.set(c.name, c); seen.add(c.name); }
    if (first) { state.loadedOnce = true; first = false; }
    scheduleRender();
    if (!page.next) break;
    after = page.next;
  }
  for (const name of [...state.clusters.keys()]) if (!seen.has(name)) state.clusters.delete(name);
  state.listComplete = true;
  scheduleRender();
}

async function loadSide() {
  const [apps, plugins, ready, summary] = await Promise.all([
    get('/api/v1/apps').catch(rethrowAuth([])),
    get('/api/v1/plugins').catch(rethrowAuth([])),
    get('/readyz', { accept: [503] }).catch(rethrowAuth(null)),
    get('/api/v1/summary', { optional: true }).catch(rethrowAuth(null)),
  ]);
  state.apps = apps;
  state.plugins = plugins;
  state.summary = summary;
  state.notifications = (ready && ready.notifications) || null;
  renderNotifications();
  const holding = Boolean((ready && ready.brake_holding) || (summary && summary.brake_holding));
  if (holding !== state.brake.holding) {
    state.brake.holding = holding;
    if (!holding) Object.assign(state.brake, { since: null, detail: null, suppressed: [] });
  }
  renderBrake();
}

function rethrowAuth(fallback) {
  return (error) => { if (error instanceof Unauthorized) throw error; return fallback; };
}

let renderQueued = false;
function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    const v = state.view;
    if (!v) return;
    if (v.kind === 'fleet') renderFleet();
    else if (v.kind === 'plugins') pluginsView();
  });
}

// Changes seen on the stream are applied by reading the changed clusters again, a few at a
// time; a burst (a mass failure) reads the whole list instead.
const pending = new Set();
let pendingTimer = null;
let sideQueued = false;
let clusterViewQueued = false;
let summaryQueued = false;
function queueRefresh(name, side) {
  if (name) pending.add(name);
  if (side) sideQueued = true;
  if (name && state.view && state.view.kind === 'cluster' && state.view.name === name) clusterViewQueued = true;
  if (!pendingTimer) pendingTimer = setTimeout(flushRefresh, 200);
}

let lastFullLoad = 0;
async function flushRefresh() {
  pendingTimer = null;
  // A burst is read as the whole list, at most every 5 s (a mass failure of 10,000 clusters
  // would otherwise read it without pause).
  const wait = lastFullLoad + 5000 - Date.now();
  if (pending.size > 100 && wait > 0) {
    pendingTimer = setTimeout(flushRefresh, wait);
    return;
  }
  const names = [...pending];
  pending.clear();
  const side = sideQueued;
  const view = clusterViewQueued;
  sideQueued = false;
  clusterViewQueued = false;
  try {
    if (names.length > 100) {
      lastFullLoad = Date.now();
      await loadClusters();
    } else {
      for (let i = 0; i < names.length; i += 8) {
        const batch = names.slice(i, i + 8);
        const got = await Promise.all(batch.map((n) => get(`/api/v1/clusters/${enc(n)}`, { optional: true })));
        batch.forEach((n, j) => (got[j] ? state.clusters.set(n, got[j]) : state.clusters.delete(n)));
      }
    }
    if (side) {
      summaryQueued = false;
      await loadSide();
    } else if (summaryQueued) {
      summaryQueued = false;
      state.summary = await get('/api/v1/summary', { optional: true });
    }
    if (view && state.view && state.view.kind === 'cluster') await clusterView(state.view.name);
    scheduleRender();
  } catch (error) {
    handleError(error);
  }
}

function onEvent(kind, event) {
  state.recent.unshift(event);
  state.recent.length = Math.min(state.recent.length, RECENT);
  if (kind === 'brake-engaged') {
    Object.assign(state.brake, { holding: true, since: event.at, detail: event.detail, suppressed: [] });
    renderBrake();
  } else if (kind === 'brake-released') {
    Object.assign(state.brake, { holding: false, since: null, detail: null, suppressed: [] });
    renderBrake();
  } else if (kind === 'failure-not-counted' && event.detail && event.detail.why === 'brake') {
    state.brake.holding = true;
    state.brake.count += 1;
    // One line per cluster: its latest suppressed failure.
    state.brake.suppressed = state.brake.suppressed.filter((s) => s.cluster !== event.cluster);
    state.brake.suppressed.unshift({ cluster: event.cluster, class: event.detail.class, at: event.at });
    state.brake.suppressed.length = Math.min(state.brake.suppressed.length, 100);
    renderBrake();
  }
  const side = kind.startsWith('app') || kind.startsWith('plugin') || kind.startsWith('deployment');
  if (kind === 'status-changed' || kind.startsWith('cluster-')) summaryQueued = true;
  queueRefresh(event.cluster, side);
  if (state.view && state.view.kind === 'fleet') renderRecent();
}

function setConnection(s, text) {
  const el = document.getElementById('connection');
  el.dataset.state = s;
  el.textContent = text;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The event stream, read with fetch() so that the token goes in a header; after a drop it
// reconnects with Last-Event-ID (so the server sends what was missed) and reads the lists
// again.
async function follow(runId) {
  let wait = 500;
  let dropped = false;
  while (runId === state.run) {
    const controller = new AbortController();
    let watchdog = null;
    const arm = () => {
      clearTimeout(watchdog);
      // The server sends a keep-alive comment every 15 s: silence means the line is dead.
      watchdog = setTimeout(() => controller.abort(), 40000);
    };
    try {
      const h2 = { Accept: 'text/event-stream' };
      if (state.lastEventId !== null) h2['Last-Event-ID'] = String(state.lastEventId);
      const response = await fetch('/api/v1/events', {
        headers: headers(h2), cache: 'no-store', credentials: 'omit', signal: controller.signal,
      });
      if (response.status === 401) throw new Unauthorized('/api/v1/events');
      if (!response.ok || !response.body) throw new Error(`event stream: ${response.status}`);
      setConnection('live', 'Live');
      wait = 500;
      if (dropped) { dropped = false; refreshAll().catch(handleError); }
      arm();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      let ev = { id: null, kind: 'message', data: [] };
      for (;;) {
        const { value, done } = await reader.read();
        if (done || runId !== state.run) break;
        arm();
        buffer += value;
        let at;
        while ((at = buffer.indexOf('\n')) >= 0) {
          let line = buffer.slice(0, at);
          buffer = buffer.slice(at + 1);
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') {
            if (ev.data.length) dispatch(ev);
            ev = { id: null, kind: 'message', data: [] };
            continue;
          }
          if (line.startsWith(':')) continue;
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          let val = colon < 0 ? '' : line.slice(colon + 1);
          if (val.startsWith(' ')) val = val.slice(1);
          if (field === 'id') ev.id = val;
          else if (field === 'event') ev.kind = val;
          else if (field === 'data') ev.data.push(val);
        }
      }
    } catch (error) {
      if (error instanceof Unauthorized) { clearTimeout(watchdog); needToken(); return; }
    }
    clearTimeout(watchdog);
    if (runId !== state.run) return;
    dropped = true;
    setConnection('down', `Disconnected: reconnecting in ${Math.round(wait / 1000) || 1} s`);
    await sleep(wait);
    wait = Math.min(wait * 2, 8000);
    setConnection('down', 'Disconnected: reconnecting…');
  }
}

function dispatch(ev) {
  if (ev.id !== null && /^\d+$/.test(ev.id)) state.lastEventId = Number(ev.id);
  let event;
  try { event = JSON.parse(ev.data.join('\n')); } catch { return; }
  onEvent(ev.kind, event);
}

async function refreshAll() {
  await Promise.all([loadClusters(), loadSide()]);
  if (state.view && state.view.kind === 'cluster') await clusterView(state.view.name);
  scheduleRender();
}

function handleError(error) {
  if (error instanceof Unauthorized) { needToken(); return; }
  const el = document.getElementById('error');
  el.textContent = `Reading vigil's API failed: ${error.message}. The page tries again.`;
  el.hidden = false;
}

// ---- routing and start ---------------------------------------------------------------------

// The cluster the address names (`#/cluster/NAME`), or null on another page.
function routedCluster() {
  const hash = location.hash || '#/';
  if (!hash.startsWith('#/cluster/')) return null;
  try { return decodeURIComponent(hash.slice('#/cluster/'.length)); } catch { return ''; }
}

function route() {
  state.generation += 1;
  const hash = location.hash || '#/';
  for (const a of document.querySelectorAll('nav a')) {
    if (a.getAttribute('href') === (hash.startsWith('#/plugins') ? '#/plugins' : '#/')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (hash.startsWith('#/cluster/')) {
    clusterView(routedCluster()).catch(handleError);
  } else if (hash.startsWith('#/plugins')) {
    pluginsView();
  } else {
    fleetView();
  }
}

function needToken(message) {
  state.run += 1;
  const form = document.getElementById('login');
  form.hidden = false;
  document.getElementById('main').hidden = true;
  document.getElementById('login-error').textContent = message || (state.token ? 'That token was refused.' : '');
  setConnection('down', 'Signed out');
  document.getElementById('token').focus();
}

async function start() {
  state.run += 1;
  const run = state.run;
  document.getElementById('login').hidden = true;
  document.getElementById('main').hidden = false;
  setConnection('connecting', 'Connecting…');
  try {
    // Follow the stream first so that no change between the lists and the stream is lost.
    follow(run);
    route();
    await Promise.all([loadClusters(), loadSide()]);
    scheduleRender();
  } catch (error) {
    handleError(error);
  }
}

state.run = 0;
document.getElementById('login').addEventListener('submit', (e) => {
  e.preventDefault();
  const input = document.getElementById('token');
  state.token = input.value.trim();
  input.value = '';
  sessionStorage.setItem(TOKEN_KEY, state.token);
  start();
});
window.addEventListener('hashchange', () => { route(); document.getElementById('main').focus({ preventScroll: true }); });
setInterval(tickAges, 1000);
// Ages tick locally; the lists are read again now and then for the probes that changed
// nothing (a healthy probe writes no event).
// A probation's progress writes no event: the plugins view reads the list again every 2 s
// while a generation is on probation or being checked, every 15 s otherwise.
let pluginTicks = 0;
setInterval(() => {
  pluginTicks += 1;
  if (!state.view || state.view.kind !== 'plugins' || document.hidden) return;
  const judging = state.plugins.some((p) => p.state === 'probation' || p.state === 'candidate');
  if (!judging && pluginTicks % 8 !== 0) return;
  get('/api/v1/plugins').then((plugins) => { state.plugins = plugins; scheduleRender(); }).catch(handleError);
}, 2000);
// A sink's failures write no event: with notifications configured, /readyz is read again
// every 10 s.
setInterval(() => {
  if (!state.notifications || document.hidden || document.getElementById('main').hidden) return;
  get('/readyz', { accept: [503] }).then((ready) => {
    state.notifications = (ready && ready.notifications) || null;
    renderNotifications();
  }).catch(handleError);
}, 10000);
let ticks = 0;
setInterval(() => {
  ticks += 1;
  if (document.hidden || document.getElementById('main').hidden) return;
  if (state.clusters.size <= 2000 || ticks % 10 === 0) refreshAll().catch(handleError);
}, 30000);
start();
