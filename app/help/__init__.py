"""The help centre: policy and how-to articles, their full-text search, and their HTML page.

- `articles`: the shipped articles (the `*.md` files beside this module) as `HelpArticle`s.
- `repository`: `sync_help_articles` (load them), `get_article`.
- `search`: `search_help`, ranked full-text search with short snippets.
- `render`: `article_page`, a small, escaped HTML page for one article.
"""
