// The token view: each token decoded, response tokens shaded by the policy's logprob (darker: less
// likely), tokens that are not trained (loss mask 0: the prompt, tool output, skipped calls) marked.
"use strict";

function tokenView(tokens, label) {
  const box = el("div", { class: "tokens", "aria-label": label });
  for (const token of tokens) {
    const classes = ["tok", token.m ? "trained" : "masked"];
    const title = [`id ${token.id}`];
    let style = null;
    if (token.lp !== null && token.lp !== undefined) {
      const probability = Math.exp(token.lp);
      title.push(`logprob ${token.lp.toFixed(3)} (p ${probability.toFixed(3)})`);
      if (token.m) style = `--shade:${(1 - probability).toFixed(3)}`;
    }
    title.push(token.m ? "trained" : "masked: not trained");
    box.append(el("span", { class: classes.join(" "), title: title.join(" · "), style }, visible(token.t)));
  }
  return box;
}

function visible(text) {
  return text.replace(/\n/g, "↵\n").replace(/\t/g, "→") || "∅";
}

function tokenLegend() {
  return el(
    "p",
    { class: "legend" },
    el("span", { class: "tok trained", style: "--shade:0.05" }, "likely"),
    " ",
    el("span", { class: "tok trained", style: "--shade:0.9" }, "unlikely"),
    " response tokens (shaded by logprob) · ",
    el("span", { class: "tok masked" }, "masked"),
    " not trained",
  );
}
