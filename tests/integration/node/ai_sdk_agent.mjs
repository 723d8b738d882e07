// A Node agent on the Vercel AI SDK (`ai` with its OpenAI provider), configured only by its environment
// (the provider reads OPENAI_BASE_URL and OPENAI_API_KEY): one chat call about the task, its answer on stdout.
import { generateText } from "ai";
import { openai } from "@ai-sdk/openai";

const task = JSON.parse(process.env.TETHER_TASK);
const { finishReason } = await generateText({
  model: openai.chat("policy"),
  prompt: task.q,
  maxOutputTokens: 8,
  maxRetries: 0,
});
console.log(JSON.stringify({ q: task.q, finish: finishReason }));
