import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    environment: "jsdom",
    include: ["*.test.jsx"],
    testTimeout: 60_000,
  },
  esbuild: { jsx: "automatic" },
});
