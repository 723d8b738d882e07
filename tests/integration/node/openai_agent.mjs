// A Node agent on the official `openai` npm package, configured only by its environment (OPENAI_BASE_URL,
// OPENAI_API_KEY), as such agents are: one chat call about the task, its answer on stdout.
import OpenAI from "openai";

const task = JSON.parse(process.env.TETHER_TASK);
const client = new OpenAI({ maxRetries: 0 });
const reply = await client.chat.completions.create({
  model: "policy",
  messages: [{ role: "user", content: task.q }],
  max_tokens: 8,
});
console.log(JSON.stringify({ q: task.q, finish: reply.choices[0].finish_reason }));
