import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// `npm run dev`: Vite serves the app and hands /api to the backend-for-frontend (server.mjs,
// `npm start` in another terminal). `npm run build`: dist/, which server.mjs serves itself.
export default defineConfig({
  plugins: [react()],
  // The client package is linked from packages/client, which has a React of its own for its
  // type checks: the app's React must be the only one in the bundle.
  resolve: { dedupe: ["react", "react-dom"] },
  server: { proxy: { "/api": `http://127.0.0.1:${process.env.PORT ?? 5174}` } },
});
