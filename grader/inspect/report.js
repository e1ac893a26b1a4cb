"use strict";
(() => {
  const SVG = "http://www.w3.org/2000/svg";
  // NaN and infinities travel as {"$float": "NaN"} (JSON has no such numbers): numbers again here.
  const numbers = (key, v) =>
    v !== null && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 1 &&
    typeof v["$float"] === "string" ? Number(v["$float"]) : v;
  const index = JSON.parse(document.getElementById("gagar-index").textContent, numbers);
  const cache = new Map();

  // Every node built from data goes through here: children are appended as nodes or as text, never parsed.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const missing = (v) => v === null || v === undefined;
  const signed = (v) => (missing(v) ? "-" : (v >= 0 ? "+" : "") + v.toFixed(4));
  const fixed = (v, digits) => (missing(v) ? "-" : v.toFixed(digits));
  const count = (v) => (missing(v) ? "-" : v.toLocaleString("en-US"));
  const plural = (n, word, many) => `${count(n)} ${n === 1 ? word : many || word + "s"}`;
  const chip = (flag) => el("span", { class: flag === "injection" ? "chip injection" : "chip", text: flag });

  function group(i) {
    if (!cache.has(i)) {
      cache.set(i, JSON.parse(document.getElementById("gagar-group-" + i).textContent, numbers));
    }
    return cache.get(i);
  }

  // -- summary ---------------------------------------------------------------------------------------------
  function card(title, ...children) {
    return el("div", { class: "card" }, el("h4", { text: title }), ...children);
  }
  function list(items) {
    return el("ul", null, ...items.map((item) => el("li", { text: item })));
  }
  function histogram(buckets, lo = 0, hi = 1, what = "spread") {
    const width = 200, height = 44, bw = width / buckets.length, top = Math.max(1, ...buckets);
    const root = svg("svg", { class: "hist", viewBox: `0 0 ${width} ${height + 12}`, width,
      height: height + 12 });
    const edge = (b) => lo + (b / buckets.length) * (hi - lo);
    buckets.forEach((n, b) => {
      const h = (n / top) * height;
      const bar = svg("rect", { x: b * bw + 1, y: height - h, width: bw - 2, height: h });
      const range = `${edge(b).toFixed(1)} to ${edge(b + 1).toFixed(1)}`;
      bar.append(svg("title", {}, `${what} ${range}: ${plural(n, "group")}`));
      root.append(bar);
    });
    root.append(svg("text", { x: 0, y: height + 11 }, String(lo)),
      svg("text", { x: width, y: height + 11, "text-anchor": "end" }, String(hi)));
    return root;
  }
  const tau = (v) => (missing(v) ? "-" : (v >= 0 ? "+" : "") + v.toFixed(2));
  const LENGTH_UNITS = { response_length: "tokens", patch_size: "patch lines (no response_length)" };
  function renderSummary() {
    const s = index.summary, st = s.statuses;
    document.getElementById("run").textContent =
      `${index.run} · ${plural(s.groups, "group")} · generated ${index.generated}`;
    const graders = s.graders.map(([name, n]) => `${name} (${n})`);
    const models = s.models.map(([model, n]) => `model ${model} (${n})`);
    const cost = s.requests
      ? [plural(s.tokens, "token"),
        `${count(s.prompt_tokens)} prompt, ${count(s.cached_prompt_tokens)} cached`,
        plural(s.requests, "request"), plural(s.retries, "retry", "retries"),
        plural(s.tool_calls, "tool call")]
      : ["no model calls"];
    cost.push(`${s.seconds.toFixed(2)} s over all groups`);
    if (s.slowest) cost.push(`slowest: ${s.slowest[1]} (${s.slowest[0].toFixed(2)} s)`);
    const cards = [
      card("Groups", el("div", { class: "big", text: String(s.groups) }),
        el("div", { text: ["graded", "skipped", "failed"].map((k) => `${st[k] || 0} ${k}`).join(" · ") })),
      card("Grader", list(graders.concat(models))),
      card("Cost", list(cost)),
    ];
    if (s.spread) {
      const p = s.spread;
      cards.push(card("Weight spread (best - worst)",
        el("div", { text: ["median", "min", "max"].map((k) => `${k} ${p[k].toFixed(3)}`).join(" · ") }),
        histogram(s.spread_histogram)));
    }
    const L = index.length;
    if (L) {
      const units = Object.entries(L.sources).map(([k, n]) => `${n} in ${LENGTH_UNITS[k] || k}`).join(", ");
      const means = `weight ${tau(L.weight)} · advantage ${tau(L.advantage)} · patch size ${tau(L.patch)}`;
      const counts = `rose ${L.rose} · fell ${L.fell} of ${plural(L.graded, "group")}; ${units}`;
      cards.push(card("Credit vs length (Kendall tau per group)", el("div", { text: means }),
        el("div", { class: "muted", text: counts }), histogram(L.histogram, -1, 1, "tau(weight, length)")));
    }
    if (s.flags.length) {
      const lines = s.flags.map(([name, c, g]) =>
        `${name}: ${plural(c, "candidate")} in ${plural(g, "group")}`);
      cards.push(card("Most frequent flags", list(lines)));
    }
    const times = ([reason, n]) => `${n} × ${reason}`;
    if (s.failures.length) cards.push(card("Failures", list(s.failures.map(times))));
    if (s.identity.length) cards.push(card("Left unchanged", list(s.identity.map(times))));
    if (!index.patches) {
      cards.push(card("Patches", el("div", { text: "not available: the run has no groups.jsonl" })));
    }
    document.getElementById("summary").append(...cards);
  }

  // -- the table of groups ---------------------------------------------------------------------------------
  const COLUMNS = [
    ["status", "status", false], ["id", "group", false], ["grader", "grader", false],
    ["n", "candidates", true], ["top", "top candidate", false], ["spread", "spread", true],
    ["flags", "flags", false], ["seconds", "seconds", true], ["tokens", "tokens", true],
  ];
  const rows = index.rows.map((data, i) => ({
    data, i, tr: null, detail: null, open: false,
    haystack: [data.id, data.status, data.grader, ...data.top, ...data.flags, data.reason]
      .join(" ").toLowerCase(),
  }));
  const tbody = document.querySelector("#groups tbody");
  let sortKey = null, sortDir = 1;

  function buildRow(row) {
    const d = row.data;
    const link = el("a", { href: "#group=" + encodeURIComponent(d.id), text: d.id });
    link.addEventListener("click", (event) => { event.preventDefault(); toggle(row); });
    row.tr = el("tr", { class: "row", tabindex: 0, "data-group": d.id },
      el("td", null, el("span", { class: "status " + d.status, text: d.status, title: d.reason || null })),
      el("td", { class: "group" }, link),
      el("td", { text: d.grader }),
      el("td", { class: "num", text: String(d.n) }),
      el("td", { text: d.top.join(", ") || "-" }),
      el("td", { class: "num", text: fixed(d.spread, 3) }),
      el("td", null, ...(d.flags.length ? d.flags.map(chip) : ["-"])),
      el("td", { class: "num", text: d.seconds.toFixed(2) }),
      el("td", { class: "num", text: d.tokens ? count(d.tokens) : "-" }));
    row.tr.addEventListener("click", (event) => { if (!event.target.closest("a")) toggle(row); });
    row.tr.addEventListener("keydown", (event) => { if (event.key === "Enter") toggle(row); });
  }
  function compare(a, b) {
    const x = a.data[sortKey], y = b.data[sortKey];
    if (x === y) return a.i - b.i;
    if (missing(x)) return 1;  // missing values last, whichever the direction
    if (missing(y)) return -1;
    if (typeof x === "number") return (x - y) * sortDir;
    return String(x).localeCompare(String(y)) * sortDir;
  }
  function layout() {
    const ordered = sortKey ? rows.slice().sort(compare) : rows;
    const fragment = document.createDocumentFragment();
    for (const row of ordered) {
      fragment.append(row.tr);
      if (row.detail) fragment.append(row.detail);
    }
    tbody.replaceChildren(fragment);
    applyFilter();
  }
  function applyFilter() {
    const words = document.getElementById("filter").value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    const status = document.getElementById("status-filter").value;
    const grader = document.getElementById("grader-filter").value;
    const flag = document.getElementById("flag-filter").value;
    let shown = 0;
    for (const row of rows) {
      const d = row.data;
      const visible = words.every((word) => row.haystack.includes(word)) && (!status || d.status === status)
        && (!grader || d.grader === grader) && (!flag || d.flags.includes(flag));
      row.tr.hidden = !visible;
      if (row.detail) row.detail.hidden = !visible || !row.open;
      shown += visible ? 1 : 0;
    }
    document.getElementById("shown").textContent = `${shown} of ${plural(rows.length, "group")}`;
  }
  function setupTable() {
    const head = document.querySelector("#groups thead tr");
    for (const [key, label, numeric] of COLUMNS) {
      const button = el("button", { type: "button", text: label, title: "sort by " + label });
      const th = el("th", { class: `c-${key}${numeric ? " num" : ""}`, "data-key": key }, button);
      button.addEventListener("click", () => {
        sortDir = sortKey === key ? -sortDir : numeric ? -1 : 1;  // numbers: biggest first on the first click
        sortKey = key;
        for (const other of head.children) other.removeAttribute("aria-sort");
        th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
        layout();
      });
      head.append(th);
    }
    const options = (id, values) => {
      const select = document.getElementById(id);
      for (const value of values) select.append(el("option", { value, text: value }));
      select.addEventListener("change", applyFilter);
    };
    options("status-filter", ["graded", "skipped", "failed"]);
    options("grader-filter", index.summary.graders.map(([name]) => name));
    options("flag-filter", index.summary.flags.map(([name]) => name));
    document.getElementById("filter").addEventListener("input", applyFilter);
    rows.forEach(buildRow);
    layout();
  }

  // -- one group, rendered when first opened ---------------------------------------------------------------
  function toggle(row, open) {
    row.open = open === undefined ? !row.open : open;
    if (row.open && !row.detail) {
      const cell = el("td", { colspan: COLUMNS.length }, renderGroup(group(row.i)));
      row.detail = el("tr", { class: "detail" }, cell);
      row.tr.after(row.detail);
    }
    row.tr.classList.toggle("open", row.open);
    if (row.detail) row.detail.hidden = !row.open || row.tr.hidden;
    if (row.open) history.replaceState(null, "", "#group=" + encodeURIComponent(row.data.id));
  }
  const DIFF = /^(diff --git |--- a\/|@@ -\d)/m;
  const DIFF_META = /^(diff |index |--- |\+\+\+ |new file|deleted file|similarity|rename |old mode|new mode)/;
  function textBlock(text) {
    const diff = DIFF.test(text);
    const pre = el("pre", { class: diff ? "diff" : "text" });
    for (const line of text.split("\n")) {
      let cls = null;
      if (diff) {
        if (DIFF_META.test(line)) cls = "meta";
        else if (line.startsWith("@@")) cls = "hunk";
        else if (line.startsWith("+")) cls = "add";
        else if (line.startsWith("-")) cls = "del";
      }
      pre.append(el("span", { class: cls }, line));
    }
    return pre;
  }
  function section(title, ...children) {
    return [el("h3", { text: title }), ...children.filter((child) => !missing(child))];
  }
  function fact(name, value) {
    return missing(value) ? null : el("span", null, el("b", { text: name + " " }), String(value));
  }
  function renderGroup(g) {
    const body = el("div", { class: "group-body", "data-group": g.id });
    const usage = g.usage.map(([k, v]) => `${k} ${count(v)}`).join(", ") || null;
    body.append(el("div", { class: "meta" }, el("span", { class: "status " + g.status, text: g.status }),
      fact("grader", g.grader), fact("model", g.model), fact("seed", g.seed),
      fact("confidence", g.confidence),
      fact("time", g.seconds.toFixed(2) + " s"), fact("usage", usage)));
    if (g.reason) body.append(el("p", null, el("b", { text: "reason: " }), g.reason));
    if (g.redistribution) body.append(el("p", null, el("b", { text: "redistribution: " }), g.redistribution));
    for (const [tid, lines] of g.flags) {
      body.append(el("div", { class: "alert", text: `injection flagged in ${tid}:\n${lines.join("\n")}` }));
    }
    if (g.ranking.length) body.append(...section("Ranking", ranking(g)));
    body.append(...section("Advantages before and after", chart(g)));
    if (g.length) body.append(...section("Credit vs length", lengthChart(g)));
    const note = g.patch_note ? el("p", { class: "note", text: g.patch_note }) : null;
    body.append(...section("Candidates", note, candidates(g)));
    if (g.transcript !== null || g.transcript_note) body.append(...section("Transcript", transcript(g)));
    return body;
  }
  function ranking(g) {
    const byId = new Map(g.candidates.map((c) => [c.id, c]));
    const member = (tid, k) => {
      const c = byId.get(tid) || {};
      return [k ? el("br") : null, el("span", { class: "tid", text: tid }),
        el("span", { class: "muted", text: missing(c.weight) ? "" : `  weight ${c.weight.toFixed(3)}` }),
        c.rationale ? el("span", { class: "why", text: "— " + c.rationale }) : null];
    };
    const tiers = g.ranking.map((tier) => el("li", null, ...tier.flatMap(member)));
    return el("ol", { class: "ranking" }, ...tiers);
  }
  function chart(g) {
    const items = g.candidates.filter((c) => !missing(c.before) || !missing(c.after));
    if (!items.length) return el("p", { class: "empty", text: "no advantages recorded" });
    const drawn = (v) => !missing(v) && Number.isFinite(v);  // a NaN or infinite advantage gets no bar
    const values = items.flatMap((c) => [c.before, c.after]).filter(drawn);
    const max = Math.max(1e-9, ...values.map(Math.abs));
    const negative = values.some((v) => v < 0);
    const labelW = 190, barW = 440, valueW = 170, rowH = 36, top = 28;
    const zero = labelW + (negative ? barW / 2 : 0), scale = (negative ? barW / 2 : barW) / max;
    const width = labelW + barW + valueW, height = top + items.length * rowH + 6;
    const root = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, width, height,
      role: "img" });
    root.append(svg("title", {}, "advantages before (grey) and after (blue) redistribution"),
      svg("rect", { class: "swatch-before", x: labelW, y: 6, width: 12, height: 10 }),
      svg("text", { x: labelW + 16, y: 15 }, "before"),
      svg("rect", { class: "swatch-after", x: labelW + 80, y: 6, width: 12, height: 10 }),
      svg("text", { x: labelW + 96, y: 15 }, "after"));
    const bar = (value, y, cls) => {
      const w = Math.abs(value) * scale;
      const rect = svg("rect", { class: value < 0 ? cls + " neg" : cls, x: value < 0 ? zero - w : zero, y,
        width: Math.max(w, 1), height: 12 });
      rect.append(svg("title", {}, signed(value)));
      return rect;
    };
    items.forEach((c, k) => {
      const y = top + k * rowH;
      const label = c.id.length > 26 ? c.id.slice(0, 25) + "…" : c.id;
      root.append(svg("text", { x: labelW - 8, y: y + 18, "text-anchor": "end" }, label));
      if (drawn(c.before)) root.append(bar(c.before, y + 3, "before"));
      if (drawn(c.after)) root.append(bar(c.after, y + 17, "after"));
      const change = `${signed(c.before)} → ${signed(c.after)}`;
      root.append(svg("text", { class: "value", x: labelW + barW + 10, y: y + 18 }, change));
    });
    root.append(svg("line", { class: "axis", x1: zero, x2: zero, y1: top - 2, y2: height - 4 }));
    return root;
  }
  // Each ranked trajectory as a point: its length across, its weight up; the taus say it in one number.
  function lengthChart(g) {
    const L = g.length, ids = Object.keys(L.lengths);
    const weight = new Map(g.candidates.map((c) => [c.id, c.weight]));
    const xs = ids.map((t) => L.lengths[t]), ys = ids.map((t) => weight.get(t) ?? 0);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(0, ...ys), y1 = Math.max(1, ...ys);
    const left = 56, right = 24, top = 26, plotW = 520, plotH = 180, width = left + plotW + right;
    const height = top + plotH + 40;
    const px = (v) => left + (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5) * plotW;
    const py = (v) => top + (1 - (v - y0) / (y1 - y0)) * plotH;
    const unit = L.source === "response_length" ? "response length (tokens)"
      : "patch size (changed lines; no response_length given)";
    const root = svg("svg", { class: "chart scatter", viewBox: `0 0 ${width} ${height}`, width, height,
      role: "img" });
    root.append(svg("title", {}, `weight against ${unit}, one point per ranked trajectory`));
    for (const v of [y0, (y0 + y1) / 2, y1]) {
      root.append(svg("line", { class: "grid", x1: left, x2: left + plotW, y1: py(v), y2: py(v) }),
        svg("text", { class: "muted", x: left - 6, y: py(v) + 4, "text-anchor": "end" }, v.toFixed(2)));
    }
    root.append(svg("line", { class: "axis", x1: left, x2: left + plotW, y1: top + plotH, y2: top + plotH }),
      svg("text", { class: "muted", x: left, y: top + plotH + 16 }, String(x0)),
      svg("text", { class: "muted", x: left + plotW, y: top + plotH + 16, "text-anchor": "end" }, String(x1)),
      svg("text", { x: left + plotW / 2, y: top + plotH + 32, "text-anchor": "middle" }, unit),
      svg("text", { x: 12, y: top + plotH / 2, transform: `rotate(-90 12 ${top + plotH / 2})`,
        "text-anchor": "middle" }, "weight"));
    const points = new Map();  // trajectories at the same spot share one point and one label
    ids.forEach((t, k) => {
      const key = `${xs[k]}|${ys[k]}`;
      if (!points.has(key)) points.set(key, { x: xs[k], y: ys[k], ids: [] });
      points.get(key).ids.push(t);
    });
    for (const p of points.values()) {
      const dot = svg("circle", { cx: px(p.x), cy: py(p.y), r: 6 });
      dot.append(svg("title", {}, `${p.ids.join(", ")}: length ${p.x}, weight ${fixed(p.y, 3)}`));
      const name = p.ids.join(", "), label = name.length > 30 ? name.slice(0, 29) + "…" : name;
      const right = px(p.x) > left + plotW * 0.7;
      root.append(dot, svg("text", { class: "muted", x: px(p.x) + (right ? -9 : 9), y: py(p.y) - 8,
        "text-anchor": right ? "end" : "start" }, label));
    }
    const line = `Kendall tau with ${unit}: weight ${tau(L.weight_vs_length)}, advantage after `
      + `${tau(L.advantage_vs_length)} · with patch size: weight ${tau(L.weight_vs_patch_size)}, advantage `
      + `after ${tau(L.advantage_vs_patch_size)} · mean length of the top tier ${L.top_length}, `
      + `of the bottom tier ${L.bottom_length}`;
    return el("div", { class: "length" }, el("p", { class: "muted", text: line }), root);
  }
  function candidates(g) {
    const box = el("div", { class: "cands" });
    for (const c of g.candidates) {
      const s = c.stats;
      const lists = s ? [["new", s.new], ["deleted", s.deleted], ["renamed", s.renamed], ["tests", s.tests],
        ["binary", s.binary]].filter(([, files]) => files.length) : [];
      const facts = el("div", { class: "facts" },
        el("div", null, el("b", { text: "apply " }), c.apply || "-",
          missing(c.patch_class) ? "" : `  · class ${c.patch_class}`),
        c.error ? el("div", { class: "alert", text: c.error }) : null,
        s ? el("div", null, el("b", { text: "files " }), s.files.join(", ") || "-") : null,
        s ? el("div", null, el("b", { text: "lines " }), `+${s.added} −${s.removed}`,
          ...lists.map(([name, files]) => `  · ${name}: ${files.join(", ")}`)) : null,
        c.fired.length ? el("div", null, ...c.fired.map(chip)) : null);
      const standing = (c.rank ? `  rank ${c.rank}` : "")
        + (missing(c.weight) ? "" : `  · weight ${c.weight.toFixed(3)}`);
      const header = el("header", null, el("span", { class: "tid", text: c.id }), "  ",
        c.passed ? el("span", { class: "status graded", text: "passed" })
          : el("span", { class: "status failed", text: "failed" }),
        el("span", { class: "muted", text: standing }));
      const signals = c.signals.length ? el("details", null, el("summary", { text: "all signals" }),
        el("pre", { class: "text" }, ...c.signals.map(([k, v]) => el("span", { text: `${k}: ${v}` }))))
        : null;
      let patch;
      if (c.patch === null) patch = el("div", { class: "note", text: "patch not available" });
      else if (!c.patch.trim()) patch = el("div", { class: "note", text: "(empty patch)" });
      else patch = textBlock(c.patch);
      const rationale = c.rationale ? el("div", { class: "rationale", text: c.rationale }) : null;
      box.append(el("div", { class: c.passed ? "cand" : "cand failing", "data-trajectory": c.id },
        header, facts, rationale, signals, patch));
    }
    return box;
  }
  function transcript(g) {
    if (g.transcript === null) return el("p", { class: "empty", text: g.transcript_note });
    const box = el("div", { class: "transcript" });
    for (const step of g.transcript) {
      const node = el("div", { class: `step ${step.kind}${step.problem ? " problem" : ""}` },
        el("span", { class: "t", text: missing(step.t) ? "" : step.t.toFixed(3) + " s" }),
        el("span", { class: "title", text: step.title }));
      const shared = !missing(step.body) && typeof step.body === "object";
      const text = shared ? index.texts[step.body.text] : step.body;
      if (text) {
        // Prompts are long and alike from group to group: folded. What the model said is shown.
        if (step.kind === "system" || step.kind === "user") {
          const summary = el("summary", { text: "show message" });
          node.append(el("details", { class: "message" }, summary, textBlock(text)));
        } else node.append(textBlock(text));
      }
      for (const call of step.calls) {
        const timing = (missing(call.seconds) ? "" : `  ${call.seconds.toFixed(3)} s`)
          + (call.error ? "  error" : "");
        const summary = el("summary", null, "→ ", el("span", { class: "name", text: call.name }),
          el("span", { class: "mono", text: `(${call.arguments})` }),
          el("span", { class: "muted", text: timing }));
        const result = call.result === null ? el("p", { class: "empty", text: "no result recorded" })
          : textBlock(call.result);
        const tool = { class: call.error ? "tool error" : "tool", "data-tool": call.name };
        node.append(el("details", tool, summary, result));
      }
      box.append(node);
    }
    return box;
  }

  // -- #group=<id> opens that group, so a link (or a headless browser) can land on it -----------------------
  function openFromHash() {
    const match = /^#group=(.*)$/.exec(location.hash);
    if (!match) return;
    let id;
    try {
      id = decodeURIComponent(match[1]);
    } catch (error) {
      return;  // a hand-edited, malformed fragment: open nothing
    }
    const row = rows.find((r) => r.data.id === id);
    if (!row) return;
    if (row.tr.hidden) {
      for (const input of document.querySelectorAll(".filters input, .filters select")) input.value = "";
      applyFilter();
    }
    toggle(row, true);
    const top = row.tr.getBoundingClientRect().top;
    if (top < 0 || top > window.innerHeight - 120) row.tr.scrollIntoView({ block: "start" });
  }

  renderSummary();
  setupTable();
  if (!rows.length) {
    document.getElementById("groups").after(el("p", { class: "empty", text: "this run has no groups" }));
  }
  window.addEventListener("hashchange", openFromHash);
  openFromHash();
})();
