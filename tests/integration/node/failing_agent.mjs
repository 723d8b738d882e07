// A Node agent that fails: Node prints the stack, then its own version as the last line of stderr.
throw new Error(`no answer for ${JSON.parse(process.env.TETHER_TASK).q}`);
