// Drawing gradus plot's panels with cairo: the only file of gradus that includes cairo, compiled
// to a stub that says so when cairo was not found at configure time.
#include <cmath>
#include <cstdio>

#include "gradus/core/error.h"
#include "plot.h"

#if GRADUS_HAS_CAIRO
#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <numbers>
#endif

namespace gradus::cli::plot {

#if GRADUS_HAS_CAIRO

namespace {

constexpr double kPanelWidth = 600, kPanelHeight = 340, kLegendRow = 28;
// Plot area inside a panel: room for the title above and tick labels left and below.
constexpr double kLeft = 72, kRight = 18, kTop = 34, kBottom = 46;

// matplotlib's tab10: runs are told apart by colour ...
constexpr double kColours[][3] = {
    {0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157},
    {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}, {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498},
    {0.737, 0.741, 0.133}, {0.090, 0.745, 0.812}};
// ... and the metrics of one panel by dash pattern.
const std::vector<double> kDashes[] = {{}, {7, 4}, {2, 3}, {9, 3, 2, 3}};

void colour(cairo_t* cr, size_t run) {
  const double* c = kColours[run % std::size(kColours)];
  cairo_set_source_rgb(cr, c[0], c[1], c[2]);
}

void dash(cairo_t* cr, size_t metric) {
  const std::vector<double>& d = kDashes[metric % std::size(kDashes)];
  cairo_set_dash(cr, d.data(), static_cast<int>(d.size()), 0);
}

// Text with its anchor at (x, y): ax = 0 left, 0.5 centre, 1 right; ay likewise top to bottom.
double text(cairo_t* cr, double x, double y, const std::string& s, double ax, double ay) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - ax * e.x_advance, y - e.y_bearing - ay * e.height);
  cairo_show_text(cr, s.c_str());
  return e.x_advance;
}

void font(cairo_t* cr, double size, bool bold = false) {
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

struct Axis {
  double lo, hi, step;  // data range (padded) and tick spacing
};

// A range with room around the data, and ticks at 1, 2 or 5 times a power of ten (about 5).
Axis axis(double lo, double hi, double pad) {
  if (hi - lo <= 0) {
    const double half = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= half;
    hi += half;
  } else {
    const double margin = (hi - lo) * pad;
    lo -= margin;
    hi += margin;
  }
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
  return {lo, hi, step};
}

std::string tick_label(double v, double step) {
  if (std::abs(v) < step * 1e-6) v = 0;
  char buf[32];
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3)) {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  } else {
    const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  }
  return buf;
}

void draw_panel(cairo_t* cr, const Panel& panel, double ox, double oy, const std::string& xl) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Line& line : panel.lines) {
    for (const Point& p : line.points) {
      x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
      y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
    }
  }
  const Axis ax = axis(x0, x1, 0.02), ay = axis(y0, y1, 0.06);
  const double left = ox + kLeft, right = ox + kPanelWidth - kRight;
  const double top = oy + kTop, bottom = oy + kPanelHeight - kBottom;
  auto px = [&](double x) { return left + (x - ax.lo) / (ax.hi - ax.lo) * (right - left); };
  auto py = [&](double y) { return bottom - (y - ay.lo) / (ay.hi - ay.lo) * (bottom - top); };

  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  font(cr, 14, true);
  text(cr, (left + right) / 2, oy + 10, panel.title, 0.5, 0);
  // Grid and tick labels.
  font(cr, 11);
  cairo_set_line_width(cr, 1);
  cairo_set_dash(cr, nullptr, 0, 0);
  for (double t = std::ceil(ax.lo / ax.step) * ax.step; t <= ax.hi; t += ax.step) {
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, px(t), top);
    cairo_line_to(cr, px(t), bottom);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
    text(cr, px(t), bottom + 6, tick_label(t, ax.step), 0.5, 0);
  }
  for (double t = std::ceil(ay.lo / ay.step) * ay.step; t <= ay.hi; t += ay.step) {
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, left, py(t));
    cairo_line_to(cr, right, py(t));
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
    text(cr, left - 6, py(t), tick_label(t, ay.step), 1, 0.5);
  }
  cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
  cairo_rectangle(cr, left, top, right - left, bottom - top);
  cairo_stroke(cr);
  font(cr, 12);
  text(cr, (left + right) / 2, bottom + 24, xl, 0.5, 0);

  // The data, clipped to the plot area; markers where points are few enough to tell apart.
  cairo_save(cr);
  cairo_rectangle(cr, left, top, right - left, bottom - top);
  cairo_clip(cr);
  cairo_set_line_width(cr, 1.8);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  for (const Line& line : panel.lines) {
    colour(cr, line.run);
    dash(cr, line.metric);
    for (size_t i = 0; i < line.points.size(); ++i) {
      const Point& p = line.points[i];
      (i == 0 ? cairo_move_to : cairo_line_to)(cr, px(p.x), py(p.y));
    }
    cairo_stroke(cr);
    if (line.points.size() <= 60) {
      for (const Point& p : line.points) {
        cairo_arc(cr, px(p.x), py(p.y), 2.6, 0, 2 * std::numbers::pi);
        cairo_fill(cr);
      }
    }
  }
  cairo_restore(cr);

  // Which dash is which metric, when the panel has several.
  if (panel.metrics.size() > 1) {
    font(cr, 11);
    double width = 0;
    for (const std::string& m : panel.metrics) {
      cairo_text_extents_t e;
      cairo_text_extents(cr, m.c_str(), &e);
      width = std::max(width, e.x_advance);
    }
    const double bx = right - width - 44, by = top + 6, row = 16;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_rectangle(cr, bx, by, width + 38, row * panel.metrics.size() + 6);
    cairo_fill(cr);
    for (size_t m = 0; m < panel.metrics.size(); ++m) {
      const double y = by + 11 + row * m;
      cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
      dash(cr, m);
      cairo_set_line_width(cr, 1.8);
      cairo_move_to(cr, bx + 4, y);
      cairo_line_to(cr, bx + 28, y);
      cairo_stroke(cr);
      text(cr, bx + 32, y, panel.metrics[m], 0, 0.5);
    }
    cairo_set_dash(cr, nullptr, 0, 0);
  }
}

// The runs' colours, left to right, wrapping; returns the height used.
double draw_legend(cairo_t* cr, const std::vector<std::string>& names, double width, bool draw) {
  font(cr, 13);
  double x = 16, y = 18;
  for (size_t r = 0; r < names.size(); ++r) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, names[r].c_str(), &e);
    const double w = 30 + e.x_advance + 24;
    if (x + w > width && x > 16) x = 16, y += kLegendRow;
    if (draw) {
      colour(cr, r);
      cairo_set_line_width(cr, 3);
      cairo_move_to(cr, x, y);
      cairo_line_to(cr, x + 24, y);
      cairo_stroke(cr);
      cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
      text(cr, x + 30, y, names[r], 0, 0.5);
    }
    x += w;
  }
  return y + kLegendRow / 2 + 4;
}

using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;

void check(cairo_status_t status, const std::string& path) {
  GRADUS_CHECK(status == CAIRO_STATUS_SUCCESS, IOError, "plot: cannot write ", path, ": ",
               cairo_status_to_string(status));
}

}  // namespace

bool can_render() {
  return true;
}

void render(const std::vector<Panel>& panels, const std::vector<std::string>& run_names,
            const std::string& x_label, const std::string& path) {
  const size_t columns = panels.size() > 1 ? 2 : 1;
  const size_t rows = (panels.size() + columns - 1) / columns;
  const double width = kPanelWidth * static_cast<double>(columns);
  // The legend's height depends on the text widths: measured on a scratch surface first.
  Surface scratch(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1), cairo_surface_destroy);
  cairo_t* measure = cairo_create(scratch.get());
  const double legend = draw_legend(measure, run_names, width, false);
  cairo_destroy(measure);
  const double height = legend + kPanelHeight * static_cast<double>(rows);

  const bool svg = path.ends_with(".svg");
  Surface surface(svg ? cairo_svg_surface_create(path.c_str(), width, height)
                      : cairo_image_surface_create(CAIRO_FORMAT_ARGB32, static_cast<int>(width),
                                                   static_cast<int>(std::ceil(height))),
                  cairo_surface_destroy);
  check(cairo_surface_status(surface.get()), path);
  cairo_t* cr = cairo_create(surface.get());
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  draw_legend(cr, run_names, width, true);
  for (size_t i = 0; i < panels.size(); ++i) {
    draw_panel(cr, panels[i], kPanelWidth * static_cast<double>(i % columns),
               legend + kPanelHeight * static_cast<double>(i / columns), x_label);
  }
  const cairo_status_t drawn = cairo_status(cr);
  cairo_destroy(cr);
  check(drawn, path);
  if (svg) {
    cairo_surface_finish(surface.get());  // writes the file
    check(cairo_surface_status(surface.get()), path);
  } else {
    check(cairo_surface_write_to_png(surface.get(), path.c_str()), path);
  }
}

#else  // built without cairo

bool can_render() {
  return false;
}

void render(const std::vector<Panel>&, const std::vector<std::string>&, const std::string&,
            const std::string&) {
  throw Error("plot: this gradus was built without cairo");  // run_plot says more first
}

#endif

}  // namespace gradus::cli::plot
